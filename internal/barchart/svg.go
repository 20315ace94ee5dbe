package barchart

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
)

// svgFontSize makes a monospace font's advance (0.6 em in the common ones)
// about charW pixels, so that the layout holds the SVG's text too.
const svgFontSize = "11.6"

// WriteSVG writes the chart as an SVG document. Labels are escaped as XML
// character data: any string gives a well-formed document.
func (c *Chart) WriteSVG(w io.Writer) error {
	l, boxes, labels, err := c.shapes()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="monospace" font-size="%s">
<rect width="%d" height="%d" fill="#ffffff"/>
`, l.Width, l.Height, l.Width, l.Height, svgFontSize, l.Width, l.Height)
	for _, b := range boxes {
		fmt.Fprintf(bw, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n",
			b.r.Min.X, b.r.Min.Y, b.r.Dx(), b.r.Dy(), hex(b.fill))
	}
	for _, t := range labels {
		fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="%s"`, t.x, t.y, [...]string{"start", "middle", "end"}[t.at])
		if t.up {
			fmt.Fprintf(bw, ` transform="rotate(-90 %d %d)"`, t.x, t.y)
		}
		bw.WriteString(">")
		if err := xml.EscapeText(bw, []byte(t.s)); err != nil {
			return err
		}
		bw.WriteString("</text>\n")
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

func hex(g color.Gray) string { return fmt.Sprintf("#%02x%02x%02x", g.Y, g.Y, g.Y) }
