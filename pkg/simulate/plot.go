package simulate

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlot draws, for each result with a timeline, the GPUs serving
// inference, lent to best-effort pods and idle over time, one panel per
// policy, as a PNG.
func WritePlot(w io.Writer, results []Result) error {
	var rows [][]*plot.Plot
	var top float64
	for _, r := range results {
		top = max(top, float64(r.FleetGPUs))
	}
	for _, r := range results {
		if len(r.Timeline) == 0 {
			continue
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: harvested %.0f of %.0f idle GPU-h (%.0f%%), %d preemptions, %d replica waits over budget",
			r.Policy, r.HarvestedGPUHours, r.IdleGPUHours, 100*r.HarvestedFraction, r.Preemptions, r.InferenceWaitsOverBudget)
		p.X.Label.Text = "day"
		p.Y.Label.Text = "GPUs"
		p.Y.Min, p.Y.Max = 0, top
		p.Legend.Top = true
		series := []struct {
			name string
			c    color.RGBA
			v    func(Sample) int64
		}{
			{"serving inference", color.RGBA{R: 200, G: 40, B: 40, A: 255}, func(s Sample) int64 { return s.Serving }},
			{"lent to best-effort", color.RGBA{G: 140, B: 60, A: 255}, func(s Sample) int64 { return s.Lent }},
			{"idle", color.RGBA{R: 90, G: 90, B: 90, A: 255}, func(s Sample) int64 { return s.Idle }},
		}
		for _, sr := range series {
			xys := make(plotter.XYs, len(r.Timeline))
			for i, s := range r.Timeline {
				xys[i].X, xys[i].Y = s.Days, float64(sr.v(s))
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			l.Color = sr.c
			l.Width = vg.Points(0.8)
			p.Add(l)
			p.Legend.Add(sr.name, l)
		}
		rows = append(rows, []*plot.Plot{p})
	}
	if len(rows) == 0 {
		return fmt.Errorf("no timeline to plot")
	}
	img := vgimg.New(vg.Points(1000), vg.Points(260*float64(len(rows))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(10)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
