package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
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
	levels                         []int
	duration                       time.Duration
	bodies                         int
	warmup                         int
}

func loadtestCommand(args []string) error {
	fs := newFlags("loadtest", "[-url URL] [-key KEY] [-cases FILE] [-case NAME] [-levels 1,32,64] [-duration 8s] [-bodies 512] [-out FILE]")
	var cfg loadtestConfig
	levels := fs.String("levels", "1,32,64", "concurrent clients per level, comma-separated")
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8008", "the server's root URL")
	fs.StringVar(&cfg.key, "key", os.Getenv("KEV_API_KEY"), "API key sent as a bearer token; enables the 401 check (KEV_API_KEY)")
	fs.StringVar(&cfg.cases, "cases", "scripts/golden/bench-cases.json", "bench cases file (Kev's serving_bench request shapes)")
	fs.StringVar(&cfg.caseName, "case", "6 questions, short state", "the case whose request is sent, each body with a new state")
	fs.DurationVar(&cfg.duration, "duration", 8*time.Second, "how long each level sends requests")
	fs.IntVar(&cfg.bodies, "bodies", 512, `distinct request bodies ("Ticket <i>. " + state), cycled`)
	fs.IntVar(&cfg.warmup, "warmup", 8, "requests sent before the first level, not measured")
	fs.StringVar(&cfg.out, "out", "", "write the JSON report to this file (default: standard output)")
	if err := parseFlags(fs, args); err != nil {
		return err
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

// loadtestRun builds the bodies from the chosen case, runs the levels and writes the report.
func loadtestRun(ctx context.Context, cfg loadtestConfig) error {
	cases, err := readCases(cfg.cases)
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
		return &CasesError{File: cfg.cases, Case: cfg.caseName, Err: fmt.Errorf("no such case")}
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
	data, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, data, 0o644); err != nil {
			return err
		}
	} else if _, err := stdout.Write(data); err != nil {
		return err
	}
	for _, l := range rep.Levels {
		fmt.Fprintf(stderr, "kev loadtest: %+v\n", l)
	}
	return nil
}
