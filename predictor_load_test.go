package kev

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/loadprogress"
)

// TestLoadProgress checks what a load reports: a progress line ending at 100 % on Options.Progress, and without
// one (standard error not a terminal) "kev: loading" events and a "kev: loaded" event with the size, seconds and
// GB/s on the Logger.
func TestLoadProgress(t *testing.T) {
	s := goldenSets(t)[0]
	var line bytes.Buffer
	loadGolden(t, s, Options{Progress: &line, DType: "bf16"})
	out := line.String()
	if !strings.HasPrefix(out, "\rkev: loading: ") || !strings.Contains(out, "(100%)") || !strings.HasSuffix(out, "\n") {
		t.Errorf("progress line %q", out)
	}

	if loadprogress.Terminal() != nil {
		t.Skip("standard error is a terminal: the progress goes there, not to the log")
	}
	var logs bytes.Buffer
	loadGolden(t, s, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	got := logs.String()
	for _, want := range []string{`msg="kev: loading"`, "total_bytes=", "bytes_per_s=", "seconds_left=",
		`msg="kev: loaded"`, "weight_bytes=", "seconds=", "gb_per_s="} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	}
}

// TestLoadMapsCPUWeights checks that a bf16 CPU load keeps the weights no adapter touches in the mapped files, and
// that the predictor still answers after the loader is gone and until Close.
func TestLoadMapsCPUWeights(t *testing.T) {
	s := goldenSets(t)[0]
	p := loadGolden(t, s, Options{DType: "bf16"})
	if p.engines[0].files == nil {
		t.Fatal("a CPU load keeps no weights files open")
	}
	if got := probs(t, p, goldenRequests(t, s)[0]); len(got) == 0 {
		t.Error("no probabilities")
	}
}

// TestBatchDebugTimes checks the debug line of each batch: its model time and the parts of it — the prefix
// cache's lookup, queuing the layers, the pointer head — each present, none negative, and together within the
// whole.
func TestBatchDebugTimes(t *testing.T) {
	s := goldenSets(t)[0]
	var logs bytes.Buffer
	p := loadGolden(t, s, Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, req := range goldenRequests(t, s)[:2] {
		if got := probs(t, p, req); len(got) == 0 {
			t.Fatal("no probabilities")
		}
	}
	batches := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"kev: batch"`) {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		ms := map[string]float64{}
		for _, k := range []string{"ms", "lookup_ms", "issue_ms", "point_ms"} {
			v, ok := raw[k].(float64)
			if !ok {
				t.Fatalf("batch line lacks %s: %s", k, line)
			}
			ms[k] = v
		}
		if ms["lookup_ms"] < 0 || ms["issue_ms"] <= 0 || ms["point_ms"] < 0 || ms["lookup_ms"]+ms["issue_ms"]+ms["point_ms"] > ms["ms"]+0.002 {
			t.Errorf("times do not add up: %s", line)
		}
		batches++
	}
	if batches < 2 {
		t.Errorf("%d batch lines, want at least 2:\n%s", batches, logs.String())
	}
}
