// Command batch answers the same questions about every record of a JSONL or CSV file with a Kev model embedded in
// the process, writing one answer line (or CSV row) per record in input order, with a progress bar on standard
// error.
//
//	go run ./examples/batch -checkpoint testdata/golden/tiny-a/kev -base testdata/golden/tiny-a/base \
//	    -questions examples/batch/testdata/questions.json examples/batch/testdata/tickets.jsonl
//
// Several workers call Predictor.Ask at once, so the predictor batches their requests into shared passes. See
// README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/kevgo/kev"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var ue usageError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

// usageError is a mistake in the command line (exit status 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// config is what a run reads, asks and writes.
type config struct {
	input, output       string
	inFormat, outFormat string // "jsonl" or "csv"
	state, id           string
	questions           []kev.QuestionEntry
	workers             int
	bar                 string // "auto", "bar", "lines" or "off"
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: batch -checkpoint DIR|NAME -questions FILE [flags] INPUT.jsonl|INPUT.csv\n\n")
		fs.PrintDefaults()
	}
	checkpoint := fs.String("checkpoint", "", "Kev checkpoint: a directory or a hub name such as jaredpalmer/kev-4b (required)")
	base := fs.String("base", "", "base model directory or hub name (default: the checkpoint's own)")
	device := fs.String("device", "cpu", "where the model runs: cpu, or cuda in a binary built with -tags cuda")
	questionsFile := fs.String("questions", "", `the questions, as the "questions" object of a System One request (required)`)
	var cfg config
	fs.StringVar(&cfg.output, "o", "", "output file (default: standard output); .csv writes CSV, anything else JSONL")
	fs.StringVar(&cfg.inFormat, "format", "", "input format: jsonl or csv (default: from the file name)")
	fs.StringVar(&cfg.state, "state", "text", `the field (JSONL) or column (CSV) holding the state; "" for whole JSONL lines`)
	fs.StringVar(&cfg.id, "id", "id", "the field or column carried to the output to identify a record")
	fs.IntVar(&cfg.workers, "workers", 2*runtime.GOMAXPROCS(0), "records asked about at once")
	fs.StringVar(&cfg.bar, "progress", "auto", "progress on standard error: bar, lines, off, or auto (a bar on a terminal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return usageError("give one input file (JSONL or CSV)")
	case *checkpoint == "":
		return usageError("-checkpoint is required: a Kev checkpoint directory, or from the repository root " +
			"-checkpoint testdata/golden/tiny-a/kev -base testdata/golden/tiny-a/base (a small random test model)")
	case *questionsFile == "":
		return usageError("-questions is required: a JSON file such as examples/batch/testdata/questions.json")
	case cfg.workers < 1:
		return usageError("-workers must be at least 1")
	}
	cfg.input = fs.Arg(0)
	if cfg.inFormat == "" {
		cfg.inFormat = formatOf(cfg.input)
	}
	if cfg.inFormat != "jsonl" && cfg.inFormat != "csv" {
		return usageError(fmt.Sprintf("-format %q: want jsonl or csv", cfg.inFormat))
	}
	cfg.outFormat = "jsonl"
	if strings.EqualFold(filepath.Ext(cfg.output), ".csv") {
		cfg.outFormat = "csv"
	}
	var err error
	if cfg.questions, err = readQuestions(*questionsFile); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := kev.Load(ctx, *checkpoint, kev.Options{Base: *base, Device: kev.Device(*device)})
	if err != nil {
		return err
	}
	defer p.Close()

	out := stdout
	if cfg.output != "" {
		f, err := os.Create(cfg.output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	bw := bufio.NewWriter(out)
	err = answerFile(ctx, p, cfg, bw, stderr)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// formatOf guesses a file's format from its name.
func formatOf(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return "csv"
	case ".jsonl", ".ndjson", ".json":
		return "jsonl"
	}
	return ""
}

// readQuestions reads a questions file: {"id": {"type": "noul"|"choice"|"score", ...}, ...}, checked as Kev's
// server checks a request's questions.
func readQuestions(path string) ([]kev.QuestionEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var req kev.Request
	body := append(append([]byte(`{"state": null, "questions": `), bytes.TrimSpace(data)...), '}')
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("questions file %s: %w", path, err)
	}
	return req.Questions, nil
}

// result is one record's answers or error.
type result struct {
	i       int
	answers []kev.AnswerEntry
	err     error
}

// answerFile asks about every record of the input with cfg.workers workers and writes the results in input order.
func answerFile(ctx context.Context, p Asker, cfg config, out io.Writer, stderr io.Writer) error {
	in, err := os.Open(cfg.input)
	if err != nil {
		return err
	}
	defer in.Close()
	var rows []row
	if cfg.inFormat == "csv" {
		rows, err = readCSV(in, cfg.state, cfg.id)
	} else {
		rows, err = readJSONL(in, cfg.state, cfg.id)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.input, err)
	}

	bar := cfg.bar == "bar"
	if cfg.bar == "auto" {
		bar = isTerminal(stderr)
	}
	var prog *progress
	if cfg.bar != "off" {
		prog = newProgress(stderr, bar, len(rows))
	}
	w := newWriter(out, cfg.outFormat, cfg.questions)

	jobs := make(chan int)
	results := make(chan result, len(rows)) // workers never block, even after a stop
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range min(cfg.workers, max(len(rows), 1)) {
		go func() {
			for i := range jobs {
				r := result{i: i, err: rows[i].err}
				if r.err == nil {
					r.answers, r.err = p.Ask(ctx, rows[i].state, cfg.questions...)
				}
				results <- r
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range rows {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	// Results arrive in any order; they are written in input order.
	pending := map[int]result{}
	next, failed := 0, 0
	for received := 0; received < len(rows); received++ {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			return fmt.Errorf("stopped after %d of %d records: %w", next, len(rows), ctx.Err())
		}
		if r.err != nil && ctx.Err() != nil {
			return fmt.Errorf("stopped after %d of %d records: %w", next, len(rows), ctx.Err())
		}
		if prog != nil {
			prog.add(r.err != nil)
		}
		pending[r.i] = r
		for {
			r, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			if r.err != nil {
				failed++
			}
			if err := w.write(rows[next], r.answers, r.err); err != nil {
				return err
			}
			next++
		}
	}
	if prog != nil {
		prog.finish()
	}
	if err := w.flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "batch: %d records, %d answered, %d failed\n", len(rows), len(rows)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d records failed (their lines say why)", failed, len(rows))
	}
	return nil
}

// Asker answers questions about a state: a *kev.Predictor.
type Asker interface {
	Ask(ctx context.Context, state any, questions ...kev.QuestionEntry) ([]kev.AnswerEntry, error)
}

// isTerminal reports whether w is a terminal (a character device), where the bar redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
