package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/kevgo/kev/internal/loadtest"
)

func init() {
	commands["loadtest"] = loadtestCommand
	summaries["loadtest"] = "drive a running System One server with concurrent HTTP clients (Kev's HTTP bench)"
}

// loadtestConfig is what kev loadtest sends, where, and for how long.
type loadtestConfig struct {
	url, key, cases, caseName, out string
	json                           bool // the JSON report on standard output instead of the table
	levels                         []int
	duration                       time.Duration
	bodies                         int
	warmup                         int
}

func loadtestCommand(args []string) error {
	fs := newFlags("loadtest", "[-url URL] [-key KEY] [-cases FILE] [-case NAME] [-levels 1,32,64] [-duration 8s] [-bodies 512] [-json] [-out FILE]")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: kev loadtest [-url URL] [-key KEY] [-cases FILE] [-case NAME] [-levels 1,32,64] [-duration 8s] [-bodies 512] [-json] [-out FILE]

Sends new tickets of one bench case to a running System One server from concurrent clients, level by level,
checks the protocol (401 without the key, 422 for an invalid body, request ids) and that equal bodies get equal
answers, and prints a table (-json: the JSON report instead; -out FILE: the JSON report to a file as well).
Exit status: 0 when every request was answered and every check held, 1 otherwise, 2 for a usage error.

`)
		fs.PrintDefaults()
	}
	var cfg loadtestConfig
	levels := fs.String("levels", "1,32,64", "concurrent clients per level, comma-separated")
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8008", "the server's root URL")
	fs.StringVar(&cfg.key, "key", "", "API key sent as a bearer token; enables the 401 check (default: KEV_API_KEY)")
	fs.StringVar(&cfg.cases, "cases", "", "bench cases file, {\"cases\": {name: request}} (default: Kev's serving benchmark shapes, built in)")
	fs.StringVar(&cfg.caseName, "case", "6 questions, short state", "the case whose request is sent, each body with a new state")
	fs.DurationVar(&cfg.duration, "duration", 8*time.Second, "how long each level sends requests")
	fs.IntVar(&cfg.bodies, "bodies", 512, `distinct request bodies ("Ticket <i>. " + state), cycled`)
	fs.IntVar(&cfg.warmup, "warmup", 8, "requests sent before the first level, not measured")
	fs.StringVar(&cfg.out, "out", "", "also write the JSON report to this file")
	fs.BoolVar(&cfg.json, "json", false, "print the JSON report on standard output instead of the table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.key == "" {
		cfg.key = os.Getenv("KEV_API_KEY") // read after parsing, so that -h never prints it
	}
	var err error
	if cfg.levels, err = parseClients(*levels); err != nil || len(cfg.levels) == 0 {
		return usagef("-levels %q: want a comma-separated list of positive client counts", *levels)
	}
	if cfg.bodies < 1 {
		return usagef("-bodies %d: want at least 1", cfg.bodies)
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	return loadtestRun(ctx, cfg)
}

// loadtestRun builds the bodies from the chosen case, runs the levels, writes the report and fails when a request
// failed or a check did not hold.
func loadtestRun(ctx context.Context, cfg loadtestConfig) error {
	cases, err := readCasesOrBundled(cfg.cases)
	if err != nil {
		return err
	}
	var c *benchCase
	for i := range cases {
		if cases[i].name == cfg.caseName {
			c = &cases[i]
		}
	}
	if c == nil {
		file := cfg.cases
		if file == "" {
			file = bundledCasesRef
		}
		names := make([]string, len(cases))
		for i := range cases {
			names[i] = strconv.Quote(cases[i].name)
		}
		return &CasesError{File: file, Case: cfg.caseName, Err: fmt.Errorf("no such case (it has %s)", strings.Join(names, ", "))}
	}
	bodies := make([][]byte, cfg.bodies)
	for i := range bodies {
		if bodies[i], err = c.request(i + 1).MarshalJSON(); err != nil {
			return err
		}
	}
	rep, err := loadtest.Run(ctx, loadtest.Config{
		URL: cfg.url, APIKey: cfg.key, Bodies: bodies,
		Levels: cfg.levels, Duration: cfg.duration, Warmup: cfg.warmup,
	})
	if err != nil {
		return err
	}
	data := rep.JSON()
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, data, 0o644); err != nil {
			return err
		}
	}
	if cfg.json {
		_, err = stdout.Write(data)
	} else {
		fmt.Fprintf(stdout, "%s, case %q, %v per level\n\n", cfg.url, cfg.caseName, cfg.duration)
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if p := rep.Problems(); len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}
