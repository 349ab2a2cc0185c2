package bench

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

// Chart layout, in pixels.
const (
	chartWidth = 960
	labelWidth = 330
	valueWidth = 170
	barHeight  = 16
	rowHeight  = 24
	titleSpace = 34
	margin     = 12
)

var (
	colBack    = color.RGBA{255, 255, 255, 255}
	colText    = color.RGBA{30, 30, 30, 255}
	colBar     = color.RGBA{70, 120, 190, 255}
	colSpread  = color.RGBA{200, 60, 40, 255}
	colAxis    = color.RGBA{160, 160, 160, 255}
	chartPlace = []color.RGBA{colBar, {90, 160, 90, 255}, {220, 150, 40, 255}, {150, 90, 170, 255}}
)

// WriteChart draws the panels one under the other as horizontal bars (the median) with
// a line from the 25th to the 75th percentile, and writes a PNG.
func WriteChart(w io.Writer, panels []Panel) error {
	h := margin
	for _, p := range panels {
		h += titleSpace + rowHeight*len(p.Bars) + margin
	}
	img := image.NewRGBA(image.Rect(0, 0, chartWidth, h))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBack}, image.Point{}, draw.Src)
	y := margin
	for _, p := range panels {
		y = drawPanel(img, p, y)
	}
	return png.Encode(w, img)
}

func drawPanel(img *image.RGBA, p Panel, y int) int {
	text(img, margin, y+16, p.Title+" ("+p.Unit+", median; line: 25th-75th percentile)")
	y += titleSpace
	scale := 0.0
	for _, b := range p.Bars {
		scale = max(scale, b.S.P75, b.S.Median)
	}
	plot := chartWidth - labelWidth - valueWidth - margin
	px := func(v float64) int {
		if scale <= 0 {
			return labelWidth
		}
		return labelWidth + int(v/scale*float64(plot))
	}
	fill(img, image.Rect(labelWidth-1, y-4, labelWidth, y+rowHeight*len(p.Bars)), colAxis)
	for i, b := range p.Bars {
		top := y + i*rowHeight
		text(img, margin, top+12, fitLabel(b.Label))
		fill(img, image.Rect(labelWidth, top, max(px(b.S.Median), labelWidth+1), top+barHeight), chartPlace[i%len(chartPlace)])
		mid := top + barHeight/2
		fill(img, image.Rect(px(b.S.P25), mid-1, max(px(b.S.P75), px(b.S.P25)+1), mid+1), colSpread)
		fill(img, image.Rect(px(b.S.P25), top+3, px(b.S.P25)+1, top+barHeight-3), colSpread)
		fill(img, image.Rect(px(b.S.P75), top+3, px(b.S.P75)+1, top+barHeight-3), colSpread)
		text(img, max(px(b.S.Median), px(b.S.P75))+6, top+12, b.S.Format(p.Unit))
	}
	return y + rowHeight*len(p.Bars) + margin
}

// labelChars is how many characters of basicfont.Face7x13 fit in the label column.
const labelChars = (labelWidth - margin - 6) / 7

// fitLabel is s cut to the label column ("..." for what is cut): a longer label would
// run under the bars and into their values. The tables keep the whole label.
func fitLabel(s string) string {
	r := []rune(s)
	if len(r) <= labelChars {
		return s
	}
	return string(r[:labelChars-3]) + "..."
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

func text(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: &image.Uniform{colText}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
