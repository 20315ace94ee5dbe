// Package barchart draws grouped bar charts as SVG or PNG, for reports the
// CLI writes (`tracepipe protovm eval --plot`). It replaces a plotting
// library whose fonts and backends cost every tracepipe process megabytes of
// binary and of memory touched at start: this package holds one 7×13 bitmap
// font and draws with the standard library's image packages.
//
// One layout in pixels serves both formats: the PNG draws its text with
// basicfont.Face7x13, the SVG with a monospace font sized to the same
// advance, so labels fit in both. Labels are data (file names): the SVG
// escapes them, the PNG draws what its font has. It does no I/O beyond the
// writer it is given.
package barchart

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Chart is a grouped bar chart: one group per label along x, one bar per
// series in each group, a y axis from 0 to YMax.
type Chart struct {
	Title  []string  // lines, centred above the bars
	YLabel string    // along the y axis
	YMax   float64   // top of the y axis; bars are clipped to [0, YMax]
	YTicks []float64 // labelled ticks on the y axis
	Groups []string  // a label per group, under it; "\n" separates lines
	Series []Series  // side by side in each group, named in the legend (top left)
}

// Series is one bar in every group.
type Series struct {
	Name   string
	Fill   color.Gray
	Values []float64 // Values[i] belongs to Groups[i]
}

// Geometry (pixels).
const (
	charW     = 7  // basicfont.Face7x13's advance; the SVG font matches it
	lineH     = 13 // its line height
	ascent    = 11 // its ascent: a baseline is this far below a line's top
	margin    = 10
	tickLen   = 4
	barW      = 18
	plotH     = 240 // height of the y axis
	minGroup  = 100 // narrowest group
	maxSide   = 1 << 14
	legendGap = 8
)

// Layout is where a chart's parts go, in pixels from the top left.
type Layout struct {
	Width, Height int
	Plot          image.Rectangle // the area inside the axes
	Group         int             // width of each group
	Legend        image.Rectangle
}

// y is the pixel row of value v on the y axis (clipped to the axis).
func (c *Chart) y(l Layout, v float64) int {
	if !(v > 0) { // also NaN
		v = 0
	}
	v = min(v, c.YMax)
	return l.Plot.Max.Y - int(math.Round(v/c.YMax*plotH))
}

// Layout places the chart's parts, or says why it cannot be drawn.
func (c *Chart) Layout() (Layout, error) {
	if !(c.YMax > 0) || math.IsInf(c.YMax, 0) {
		return Layout{}, fmt.Errorf("barchart: y axis maximum %v, want a finite value > 0", c.YMax)
	}
	for _, s := range c.Series {
		if len(s.Values) != len(c.Groups) {
			return Layout{}, fmt.Errorf("barchart: series %q has %d values for %d groups", s.Name, len(s.Values), len(c.Groups))
		}
	}
	var l Layout
	top := margin + len(c.Title)*(lineH+2) + legendGap
	tickW := 0
	for _, v := range c.YTicks {
		tickW = max(tickW, len(tickLabel(v)))
	}
	left := margin + lineH + 6 + tickW*charW + 3 + tickLen
	longest, lines := 0, 1
	for _, g := range c.Groups {
		ls := strings.Split(g, "\n")
		lines = max(lines, len(ls))
		for _, line := range ls {
			longest = max(longest, width(line))
		}
	}
	l.Group = max(minGroup, longest*charW+16, len(c.Series)*barW+16)
	l.Plot = image.Rect(left, top, left+max(1, len(c.Groups))*l.Group, top+plotH)
	legendW := 0
	for _, s := range c.Series {
		legendW = max(legendW, 14+width(s.Name)*charW)
	}
	lx, ly := l.Plot.Min.X+legendGap, l.Plot.Min.Y+4
	l.Legend = image.Rect(lx, ly, lx+legendW, ly+len(c.Series)*(lineH+2))
	l.Width = max(l.Plot.Max.X, l.Legend.Max.X) + margin
	for _, t := range c.Title {
		l.Width = max(l.Width, width(t)*charW+4*margin)
	}
	l.Height = l.Plot.Max.Y + tickLen + 4 + lines*(lineH+1) + margin
	if l.Width > maxSide || l.Height > maxSide {
		return Layout{}, fmt.Errorf("barchart: %d×%d pixels, more than %d on a side: fewer groups or shorter labels", l.Width, l.Height, maxSide)
	}
	return l, nil
}

// width is the number of character cells s takes: one per rune (the PNG
// font draws what it lacks as one replacement glyph).
func width(s string) int { return utf8.RuneCountInString(s) }

func tickLabel(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// box is a filled rectangle; lines are one pixel wide boxes.
type box struct {
	r    image.Rectangle
	fill color.Gray
}

// anchor says which point of a label its position is.
type anchor int

const (
	start anchor = iota
	middle
	end
)

// label is a line of text whose baseline starts, centres or ends at (x, y);
// up turns it to run bottom to top around that point.
type label struct {
	x, y int
	s    string
	at   anchor
	up   bool
}

var black = color.Gray{}

// shapes lays the chart out as the boxes and labels both formats draw.
func (c *Chart) shapes() (Layout, []box, []label, error) {
	l, err := c.Layout()
	if err != nil {
		return l, nil, nil, err
	}
	var boxes []box
	var labels []label
	for i, t := range c.Title {
		labels = append(labels, label{x: l.Width / 2, y: margin + ascent + i*(lineH+2), s: t, at: middle})
	}
	p := l.Plot
	// Axes, y ticks with their labels, the y label.
	boxes = append(boxes,
		box{image.Rect(p.Min.X-1, p.Min.Y, p.Min.X, p.Max.Y+1), black},
		box{image.Rect(p.Min.X-1, p.Max.Y, p.Max.X, p.Max.Y+1), black})
	for _, v := range c.YTicks {
		y := c.y(l, v)
		boxes = append(boxes, box{image.Rect(p.Min.X-1-tickLen, y, p.Min.X-1, y+1), black})
		labels = append(labels, label{x: p.Min.X - 1 - tickLen - 3, y: y + 4, s: tickLabel(v), at: end})
	}
	labels = append(labels, label{x: margin + ascent, y: (p.Min.Y + p.Max.Y) / 2, s: c.YLabel, at: middle, up: true})
	// Each group: its bars side by side around its centre, a tick, its label lines.
	for i, g := range c.Groups {
		cx := p.Min.X + i*l.Group + l.Group/2
		x := cx - len(c.Series)*barW/2
		for _, s := range c.Series {
			boxes = append(boxes, box{image.Rect(x, c.y(l, s.Values[i]), x+barW, p.Max.Y), s.Fill})
			x += barW
		}
		boxes = append(boxes, box{image.Rect(cx, p.Max.Y+1, cx+1, p.Max.Y+1+tickLen), black})
		for j, line := range strings.Split(g, "\n") {
			labels = append(labels, label{x: cx, y: p.Max.Y + tickLen + 4 + ascent + j*(lineH+1), s: line, at: middle})
		}
	}
	// The legend: a swatch and a name per series.
	for k, s := range c.Series {
		y := l.Legend.Min.Y + k*(lineH+2)
		boxes = append(boxes, box{image.Rect(l.Legend.Min.X, y+1, l.Legend.Min.X+10, y+11), s.Fill})
		labels = append(labels, label{x: l.Legend.Min.X + 14, y: y + 10, s: s.Name, at: start})
	}
	return l, boxes, labels, nil
}
