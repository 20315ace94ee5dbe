package barchart

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// WritePNG writes the chart as a grayscale PNG, its text in
// basicfont.Face7x13 (ASCII; other runes draw as a replacement glyph).
func (c *Chart) WritePNG(w io.Writer) error {
	l, boxes, labels, err := c.shapes()
	if err != nil {
		return err
	}
	img := image.NewGray(image.Rect(0, 0, l.Width, l.Height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for _, b := range boxes {
		draw.Draw(img, b.r, image.NewUniform(b.fill), image.Point{}, draw.Src)
	}
	for _, t := range labels {
		drawLabel(img, t)
	}
	return png.Encode(w, img)
}

// drawLabel draws t in black: straight onto img, or, turned up, into a
// mask first whose pixels are then placed rotated by 90° anticlockwise.
func drawLabel(img *image.Gray, t label) {
	d := font.Drawer{Src: image.Black, Face: basicfont.Face7x13}
	w := d.MeasureString(t.s).Round()
	offset := [...]int{0, w / 2, w}[t.at]
	if !t.up {
		d.Dst, d.Dot = img, fixed.P(t.x-offset, t.y)
		d.DrawString(t.s)
		return
	}
	f := basicfont.Face7x13
	mask := image.NewAlpha(image.Rect(0, -f.Ascent, w, f.Descent))
	d.Dst, d.Src = mask, image.Opaque
	d.DrawString(t.s)
	// A mask pixel (u, v), u along the baseline and v below it, lands at
	// (x+v, y-u): the text runs upwards with its tops to the left.
	for v := mask.Rect.Min.Y; v < mask.Rect.Max.Y; v++ {
		for u := 0; u < w; u++ {
			a := mask.AlphaAt(u, v).A
			x, y := t.x+v, t.y-(u-offset)
			if a == 0 || !(image.Point{x, y}.In(img.Rect)) {
				continue
			}
			img.SetGray(x, y, color.Gray{Y: min(img.GrayAt(x, y).Y, 255-a)})
		}
	}
}
