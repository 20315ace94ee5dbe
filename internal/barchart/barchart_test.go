package barchart

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func testChart() *Chart {
	return &Chart{
		Title:  []string{"a chart", `trace <&"'>.pftrace`},
		YLabel: "share (%)",
		YMax:   120,
		YTicks: []float64{0, 50, 100},
		Groups: []string{"baseline\n0 %", `x<&">.yaml` + "\nrestore\n50 %", "full"},
		Series: []Series{
			{Name: "black", Fill: color.Gray{Y: 0}, Values: []float64{0, 50, 100}},
			{Name: "grey & <more>", Fill: color.Gray{Y: 170}, Values: []float64{-5, 25, 500}},
		},
	}
}

// svgDoc decodes an SVG document to EOF: the root's size and every
// <text> element's content in order. Any syntax error fails the test.
func svgDoc(t *testing.T, b []byte) (width, height int, texts []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var in bool
	var text strings.Builder
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return width, height, texts
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "svg" {
				for _, a := range tok.Attr {
					switch a.Name.Local {
					case "width":
						width, _ = strconv.Atoi(a.Value)
					case "height":
						height, _ = strconv.Atoi(a.Value)
					}
				}
			}
			in, text = tok.Name.Local == "text", strings.Builder{}
		case xml.CharData:
			if in {
				text.Write(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				texts, in = append(texts, text.String()), false
			}
		}
	}
}

// The SVG is well-formed XML of the layout's size, and its text elements
// carry the title, every group label line, tick and series name verbatim,
// markup characters included.
func TestSVG(t *testing.T) {
	c := testChart()
	l, err := c.Layout()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	w, h, texts := svgDoc(t, buf.Bytes())
	if w != l.Width || h != l.Height {
		t.Errorf("svg %d×%d, layout %d×%d", w, h, l.Width, l.Height)
	}
	want := append([]string{}, c.Title...)
	for _, g := range c.Groups {
		want = append(want, strings.Split(g, "\n")...)
	}
	want = append(want, "0", "50", "100", c.YLabel, c.Series[0].Name, c.Series[1].Name)
	for _, s := range want {
		if !slices.Contains(texts, s) {
			t.Errorf("no text %q in %q", s, texts)
		}
	}
	// A legend wider than the groups and the title widens the canvas.
	c.Title, c.Groups = nil, c.Groups[:1]
	c.Series[0].Values, c.Series[1].Values = c.Series[0].Values[:1], c.Series[1].Values[:1]
	c.Series[0].Name = strings.Repeat("a long series name ", 3)
	if l, err := c.Layout(); err != nil || l.Legend.Max.X > l.Width {
		t.Errorf("legend %v on a canvas %d wide (%v)", l.Legend, l.Width, err)
	}
}

// The PNG decodes to the layout's size; each bar is its series' grey from
// the axis up to its value (clipped to the axis) and white above; the
// title's text is drawn.
func TestPNG(t *testing.T) {
	c := testChart()
	l, err := c.Layout()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, l.Width, l.Height) {
		t.Fatalf("png bounds %v, layout %d×%d", got, l.Width, l.Height)
	}
	gray := func(x, y int) uint8 { return color.GrayModel.Convert(img.At(x, y)).(color.Gray).Y }
	perPixel := float64(l.Plot.Dy()) / c.YMax
	for i := range c.Groups {
		cx := l.Plot.Min.X + i*l.Group + l.Group/2
		for j, s := range c.Series {
			x := cx - barW + j*barW + barW/2 // the bar's middle column
			v := min(max(s.Values[i], 0), c.YMax)
			top := l.Plot.Max.Y - int(v*perPixel+0.5)
			if v > 0 {
				if got := gray(x, top); got != s.Fill.Y {
					t.Errorf("group %d series %d: top pixel (%d,%d) is %d, want %d", i, j, x, top, got, s.Fill.Y)
				}
			}
			if above := top - 1; above > l.Legend.Max.Y {
				if got := gray(x, above); got != 255 {
					t.Errorf("group %d series %d: pixel (%d,%d) above the bar is %d, want white", i, j, x, above, got)
				}
			}
		}
	}
	dark := 0
	for x := 0; x < l.Width; x++ {
		for y := margin; y < margin+lineH; y++ {
			if gray(x, y) < 128 {
				dark++
			}
		}
	}
	if dark < 20 {
		t.Errorf("%d dark pixels in the title line: no text drawn", dark)
	}
}

// Charts that cannot be drawn are errors, not panics or huge images.
func TestLayoutErrors(t *testing.T) {
	for name, mutate := range map[string]func(*Chart){
		"values":   func(c *Chart) { c.Series[1].Values = c.Series[1].Values[:2] },
		"ymax 0":   func(c *Chart) { c.YMax = 0 },
		"ymax nan": func(c *Chart) { c.YMax = math.NaN() },
		"too wide": func(c *Chart) { c.Groups[0] = strings.Repeat("x", maxSide/charW) },
		"too tall": func(c *Chart) { c.Groups[0] = strings.Repeat("x\n", maxSide/lineH) },
	} {
		c := testChart()
		mutate(c)
		if _, err := c.Layout(); err == nil {
			t.Errorf("%s: no error", name)
		}
		for _, write := range []func(io.Writer) error{c.WriteSVG, c.WritePNG} {
			var buf bytes.Buffer
			if err := write(&buf); err == nil || buf.Len() != 0 {
				t.Errorf("%s: err %v after %d bytes", name, err, buf.Len())
			}
		}
	}
}

// Any labels give a well-formed SVG and a PNG of the layout's size, or an
// error from Layout.
func FuzzChart(f *testing.F) {
	f.Add("baseline", "x<&\">.yaml/restore", "title", 50.0)
	f.Add("\x00\x01\ufffe\xff", "]]><!--", "\r\n\t", -1.0)
	f.Add("π/µ", "a\nb\nc", "", 1e300)
	f.Fuzz(func(t *testing.T, g0, g1, title string, v float64) {
		c := testChart()
		c.Groups[0], c.Groups[1], c.Title[0] = g0, g1, title
		c.Series[0].Values[1] = v
		l, err := c.Layout()
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := c.WriteSVG(&buf); err != nil {
			t.Fatal(err)
		}
		if w, h, _ := svgDoc(t, buf.Bytes()); w != l.Width || h != l.Height {
			t.Fatalf("svg %d×%d, layout %d×%d", w, h, l.Width, l.Height)
		}
		buf.Reset()
		if err := c.WritePNG(&buf); err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(&buf)
		if err != nil || cfg.Width != l.Width || cfg.Height != l.Height {
			t.Fatalf("png %v: %d×%d, layout %d×%d", err, cfg.Width, cfg.Height, l.Width, l.Height)
		}
	})
}
