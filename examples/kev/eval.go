package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/eval"
)

func init() {
	commands["eval"] = evalCommand
	summaries["eval"] = "score a checkpoint on labelled requests (JSON Lines): accuracy, calibration, temperature, option order"
}

func evalCommand(args []string) error {
	fs := newFlags("eval", "[model flags] [-json] [-fit-temperature] [-rotations N] [-compare DTYPE] [-o FILE] [-svg FILE] [labelled.jsonl | -]")
	var mf modelFlags
	mf.register(fs)
	asJSON := fs.Bool("json", false, "write the report as one JSON object instead of tables")
	fit := fs.Bool("fit-temperature", false, "find the pointer temperature of least log loss and report the metrics before and after")
	rotations := fs.Int("rotations", 1, "ask each choice and score question in this many option orders (cyclic rotations; a score's reversed scale) and score the mean")
	temperature := fs.Float64("temperature", 0, "pointer temperature to load the checkpoint with (0: head.pt's)")
	outPath := fs.String("o", "", "write the report to this file instead of standard output")
	svgPath := fs.String("svg", "", `reliability diagram (SVG) path; default: beside -o, else beside the input file (FILE.reliability.svg); "none" for none`)
	concurrency := fs.Int("concurrency", 8, "requests in flight")
	compare := fs.String("compare", "", "run the file a second time with this weight and compute type (as -dtype: fp32, bf16, fp16, fp8) and set the two runs side by side: accuracy, log loss, Brier, ECE, the largest |Δp| and the argmax agreement between them (the other flags apply to both; the tables and the diagram are the -dtype run's)")
	input, err := parseInput(fs, args) // flags may come before and after the input path
	if err != nil {
		return err
	}
	if *rotations < 1 {
		return usagef("-rotations must be at least 1")
	}
	if *temperature < 0 {
		return usagef("-temperature must be positive (or 0 for head.pt's)")
	}

	data, err := readInput(input)
	if err != nil {
		return fmt.Errorf("reading the input: %w", err)
	}
	examples, err := eval.ReadExamples(bytes.NewReader(data))
	if err != nil {
		if input != "" && input != "-" {
			return fmt.Errorf("%s: %w", input, err)
		}
		return err
	}

	run, opts := mf.options()
	opts.Temperature = *temperature
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// evalWith loads the checkpoint with opts, scores the examples and closes it (so that a second run has the
	// device to itself).
	evalWith := func(opts kev.Options) (*eval.Report, kev.DType, error) {
		m, err := loadModel(ctx, run, opts)
		if err != nil {
			return nil, "", err
		}
		defer m.Close()
		reportMemory(m.Info())
		bar := newProgress(stderr)
		rep, err := eval.RunExamples(ctx, m.Predictor, examples, eval.Options{
			Rotations: *rotations, FitTemperature: *fit, Concurrency: *concurrency, Progress: bar.update,
		})
		bar.finish()
		return rep, m.Info().DType, err
	}
	var orep *eval.Report // the -compare run, first: a type the device refuses is refused before the long run
	var odtype kev.DType
	if *compare != "" {
		other := opts
		other.DType = kev.DType(*compare)
		if orep, odtype, err = evalWith(other); err != nil {
			return fmt.Errorf("-compare %s: %w", *compare, err)
		}
	}
	rep, dtype, err := evalWith(opts)
	if err != nil {
		return err
	}
	if orep != nil {
		if rep.Compare, err = eval.Compare(rep, orep, string(dtype), string(odtype)); err != nil {
			return err
		}
	}

	out := stdout
	if *outPath != "" {
		f, err := os.Create(*outPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	if *asJSON {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if _, err := out.Write(append(b, '\n')); err != nil {
			return err
		}
	} else if err := rep.WriteText(out); err != nil {
		return err
	}
	if svg := diagramPath(*svgPath, *outPath, input); svg != "" {
		var buf bytes.Buffer
		if err := rep.WriteSVG(&buf); err != nil {
			return err
		}
		if err := os.WriteFile(svg, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kev: reliability diagram written to %s\n", svg)
	}
	if *outPath != "" {
		if f, ok := out.(*os.File); ok {
			return f.Close()
		}
	}
	return nil
}

// diagramPath is where the reliability diagram goes: the -svg flag, else beside the output file, else beside the
// input file; "" (nowhere) for standard input to standard output or -svg none.
func diagramPath(flagPath, outPath, input string) string {
	switch {
	case flagPath == "none":
		return ""
	case flagPath != "":
		return flagPath
	case outPath != "":
		return strings.TrimSuffix(outPath, filepath.Ext(outPath)) + ".svg"
	case input != "" && input != "-":
		return strings.TrimSuffix(input, filepath.Ext(input)) + ".reliability.svg"
	}
	return ""
}

// progress draws a one-line progress bar with the rate and the time left on a terminal, and nothing elsewhere.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	on    bool
	start time.Time
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer) *progress {
	on := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			on = true
		}
	}
	return &progress{w: w, on: on, start: time.Now()}
}

func (p *progress) update(done, total int) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	fmt.Fprint(p.w, "\r"+progressLine(done, total, now.Sub(p.start)))
	p.drawn = true
}

func (p *progress) finish() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// progressLine is the bar: lines done of total, a 30-wide bar, the rate and the time left at that rate.
func progressLine(done, total int, elapsed time.Duration) string {
	const width = 30
	filled := 0
	if total > 0 {
		filled = width * done / total
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	left := "?"
	if rate > 0 {
		left = (time.Duration(float64(total-done) / rate * float64(time.Second))).Round(time.Second).String()
	}
	return fmt.Sprintf("%d/%d [%s] %.1f lines/s, %s left ", done, total, bar, rate, left)
}
