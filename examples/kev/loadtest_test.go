package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/loadtest"
)

// TestLoadtestAgainstServe serves the bundled checkpoint with a key, drives it with kev loadtest at two levels over
// loopback HTTP, and checks the report: every request answered, the protocol checks held, answers stable.
func TestLoadtestAgainstServe(t *testing.T) {
	cfg, err := serveConfigFrom([]string{"-addr", "127.0.0.1:0"}, func(k string) string {
		if k == "KEV_API_KEY" {
			return "secret"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, _ := startServe(t, func() error { return serve(ctx, cfg) })
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	out := filepath.Join(t.TempDir(), "http-bench.json")
	code, table, errOut := runCmd(t, "", "loadtest", "-url", "http://"+addr, "-key", "secret", "-cases", "testdata/bench-cases.json",
		"-case", "2 questions", "-out", out, "-levels", "1,4", "-duration", "300ms", "-bodies", "3", "-warmup", "2")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, s := range []string{"clients  requests  errors", "model p50 ms", "no key → 401 ok; invalid body → 422 ok; request ids ok",
		"answers: the same for every request with the same body"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, table)
		}
	}
	t.Logf("kev loadtest printed:\n%s", table)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep loadtest.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(rep.Levels) != 2 || rep.Levels[0].Concurrency != 1 || rep.Levels[1].Concurrency != 4 {
		t.Fatalf("levels %+v", rep.Levels)
	}
	for _, l := range rep.Levels {
		if l.Requests < 1 || l.Errors != 0 || l.RPS <= 0 || l.P50MS <= 0 || l.P99MS < l.P50MS || l.ModelP50 <= 0 {
			t.Errorf("level %+v", l)
		}
	}
	if !rep.AnswersEqual || rep.Mismatches != 0 {
		t.Errorf("answers differ across runs: %d mismatches", rep.Mismatches)
	}
	if p := rep.Protocol; !p.OK || p.Unauthorized != 401 || p.Invalid != 422 || !p.RequestID {
		t.Errorf("protocol checks: %+v", p)
	}
}

func TestLoadtestFlags(t *testing.T) {
	for _, args := range [][]string{{"-levels", "0"}, {"-levels", "x"}, {"-bodies", "0"}, {"stray"}} {
		if err := loadtestCommand(args); err == nil {
			t.Errorf("%q: no error", args)
		} else if _, ok := err.(*usageError); !ok {
			t.Errorf("%q: %T %v, want a usage error", args, err, err)
		}
	}
}
