package eval

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"text/tabwriter"

	"github.com/kevgo/kev"
)

// typeOrder is the order question types are shown in.
var typeOrder = []kev.QuestionType{kev.TypeNoul, kev.TypeChoice, kev.TypeScore}

// WriteText writes the report as aligned tables: one row per question id, per type and overall; then the
// temperature fit and the order sensitivity when they were asked for, and the comparison with another run when
// Compare is set.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "question\ttype\tn\taccuracy\tmacro-F1\tBrier\tlog loss\tECE\tconfidence")
	row := func(name, typ string, m Metrics) {
		f1 := "-"
		if m.MacroF1 != nil {
			f1 = fmt.Sprintf("%.4f", *m.MacroF1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.4f\t%s\t%.4f\t%.4f\t%.4f\t%.4f\n", name, typ, m.N, m.Accuracy, f1, m.Brier, m.LogLoss, m.ECE, m.Confidence)
	}
	for _, q := range rep.Questions {
		row(q.ID, string(q.Type), q.Metrics)
	}
	for _, t := range typeOrder {
		if m, ok := rep.Types[t]; ok {
			row("all "+string(t), string(t), m)
		}
	}
	row("overall", "", rep.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d lines, %d questions scored", rep.Records, rep.Overall.N)
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(bw, ", %d lines refused (first: line %d: %s)", len(rep.Skipped), rep.Skipped[0].Line, rep.Skipped[0].Error)
	}
	fmt.Fprintln(bw)
	if t := rep.Temperature; t != nil {
		bound := ""
		if t.AtBound {
			bound = fmt.Sprintf(", at the edge of the search (×%d or ÷%d): the data want a temperature further out", FitRange, FitRange)
		}
		fmt.Fprintf(bw, "temperature: %.4g → %.4g (least log loss%s): log loss %.4f → %.4f, Brier %.4f → %.4f, ECE %.4f → %.4f\n",
			t.From, t.Fitted, bound, t.Before.LogLoss, t.After.LogLoss, t.Before.Brier, t.After.Brier, t.Before.ECE, t.After.ECE)
	}
	if r := rep.Rotations; r != nil {
		fmt.Fprintf(bw, "rotations: up to %d orders; order sensitivity removed: max |Δp| %.4f, mean %.4f over %d questions, argmax changed with the order on %d; one order alone: accuracy %.4f, log loss %.4f, ECE %.4f\n",
			r.N, r.MaxDelta, r.MeanDelta, r.Questions, r.Flips, r.Single.Accuracy, r.Single.LogLoss, r.Single.ECE)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if rep.Compare != nil {
		return rep.Compare.WriteText(w)
	}
	return nil
}

// SVG layout of one reliability panel.
const (
	panelW, panelH = 300, 330 // panel size
	plotX, plotY   = 50, 40   // the plot's top-left corner in the panel
	plotS          = 230      // the plot's side
)

// PointXY returns where a bin with the given mean confidence and accuracy is drawn in the panel with index
// panel of WriteSVG's output.
func PointXY(panel int, confidence, accuracy float64) (x, y float64) {
	return float64(panel*panelW+plotX) + confidence*plotS, float64(plotY) + (1-accuracy)*plotS
}

// WriteSVG draws the reliability diagram: one panel per question type present (noul, choice, score), each with
// the diagonal of perfect calibration and one point per non-empty confidence bin at (mean top probability,
// accuracy), its area proportional to the bin's questions. Each point is a <circle class="bin"> carrying data-n,
// data-confidence and data-accuracy; PointXY gives its centre.
func (rep *Report) WriteSVG(w io.Writer) error {
	var types []kev.QuestionType
	for _, t := range typeOrder {
		if _, ok := rep.Reliability[t]; ok {
			types = append(types, t)
		}
	}
	bw := bufio.NewWriter(w)
	width := max(1, len(types)) * panelW
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, panelH, width, panelH)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, panelH)
	for i, t := range types {
		bins := rep.Reliability[t]
		m := rep.Types[t]
		ox := float64(i * panelW)
		fmt.Fprintf(bw, `<g class="panel" data-type="%s">`+"\n", html.EscapeString(string(t)))
		// The title in two lines, so that it fits the panel (the last one's right edge is the image's).
		fmt.Fprintf(bw, `<text class="title" x="%g" y="16" font-size="13" font-weight="bold">%s: n=%d</text>`+"\n",
			ox+plotX, html.EscapeString(string(t)), m.N)
		fmt.Fprintf(bw, `<text class="title" x="%g" y="31">accuracy %.3f, ECE %.3f</text>`+"\n", ox+plotX, m.Accuracy, m.ECE)
		x0, y0 := PointXY(i, 0, 0)
		x1, y1 := PointXY(i, 1, 1)
		fmt.Fprintf(bw, `<rect x="%g" y="%g" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y1, plotS, plotS)
		fmt.Fprintf(bw, `<line class="diagonal" x1="%g" y1="%g" x2="%g" y2="%g" stroke="#aaa" stroke-dasharray="4 3"/>`+"\n", x0, y0, x1, y1)
		for k := 0; k <= 10; k += 5 {
			v := float64(k) / 10
			tx, _ := PointXY(i, v, 0)
			_, ty := PointXY(i, 0, v)
			fmt.Fprintf(bw, `<text x="%g" y="%g" text-anchor="middle">%g</text>`+"\n", tx, y0+14, v)
			fmt.Fprintf(bw, `<text x="%g" y="%g" text-anchor="end">%g</text>`+"\n", x0-4, ty+4, v)
		}
		fmt.Fprintf(bw, `<text x="%g" y="%g" text-anchor="middle">mean top probability</text>`+"\n", x0+plotS/2, y0+30)
		fmt.Fprintf(bw, `<text x="%g" y="%g" text-anchor="middle" transform="rotate(-90 %g %g)">accuracy</text>`+"\n",
			ox+14, float64(plotY+plotS/2), ox+14, float64(plotY+plotS/2))
		most := 1
		for _, b := range bins {
			most = max(most, b.N)
		}
		var path string
		for _, b := range bins {
			if b.N == 0 {
				continue
			}
			x, y := PointXY(i, b.Confidence, b.Accuracy)
			if path == "" {
				path = fmt.Sprintf("M%.2f %.2f", x, y)
			} else {
				path += fmt.Sprintf(" L%.2f %.2f", x, y)
			}
		}
		if path != "" {
			fmt.Fprintf(bw, `<path d="%s" fill="none" stroke="#1f77b4"/>`+"\n", path)
		}
		for _, b := range bins {
			if b.N == 0 {
				continue
			}
			x, y := PointXY(i, b.Confidence, b.Accuracy)
			r := 2 + 8*math.Sqrt(float64(b.N)/float64(most))
			fmt.Fprintf(bw, `<circle class="bin" cx="%.4f" cy="%.4f" r="%.2f" fill="#1f77b4" fill-opacity="0.6" data-n="%d" data-confidence="%.6f" data-accuracy="%.6f"><title>%.1f–%.1f: n=%d, confidence %.3f, accuracy %.3f</title></circle>`+"\n",
				x, y, r, b.N, b.Confidence, b.Accuracy, b.Lo, b.Hi, b.N, b.Confidence, b.Accuracy)
		}
		fmt.Fprintln(bw, "</g>")
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}
