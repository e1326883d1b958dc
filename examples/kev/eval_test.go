package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/eval"
)

// TestEval runs kev eval on the worked example of the README and checks its JSON report against the library's and
// the diagram it writes beside it.
func TestEval(t *testing.T) {
	root := filepath.Join("..", "..") // tests run in the package's directory
	input := filepath.Join(root, "eval", "testdata", "tickets.jsonl")
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	code, stdoutText, errOut := runCmd(t, "", "eval", "-json", "-fit-temperature", "-o", out, input, "-rotations", "3")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if stdoutText != "" {
		t.Errorf("stdout %q with -o", stdoutText)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Overall map[string]any `json:"overall"`
		eval.Report
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"n", "accuracy", "brier", "log_loss", "ece"} {
		if _, ok := got.Overall[k]; !ok {
			t.Errorf("overall lacks %q: %s", k, data)
		}
	}
	if got.Temperature == nil || got.Rotations == nil || got.Rotations.N != 3 {
		t.Errorf("report lacks the temperature fit or the rotations: %s", data)
	}

	p, err := kev.Load(context.Background(), filepath.Join(root, "testdata", "golden", bundledRun), kev.Options{Base: filepath.Join(root, "testdata", "golden", bundledBase)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := eval.Run(context.Background(), p, f, eval.Options{Rotations: 3, FitTemperature: true})
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.MarshalIndent(want, "", "  ")
	if string(wantJSON)+"\n" != string(data) {
		t.Errorf("kev eval wrote\n%s\nthe library reports\n%s", data, wantJSON)
	}

	svg, err := os.ReadFile(filepath.Join(dir, "report.svg"))
	if err != nil {
		t.Fatalf("no diagram beside the report: %v (stderr %s)", err, errOut)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil || bytes.Count(svg, []byte(`class="bin"`)) == 0 {
		t.Errorf("diagram: %v\n%s", err, svg)
	}

	// The table, from standard input, with no diagram.
	in, _ := os.ReadFile(input)
	code, table, errOut := runCmd(t, string(in), "eval", "-svg", "none")
	if code != 0 || !strings.Contains(table, "overall") || !strings.Contains(table, "all choice") || strings.Contains(errOut, "diagram") {
		t.Errorf("exit %d, table\n%s\nstderr %s", code, table, errOut)
	}
}

func TestEvalUsage(t *testing.T) {
	for _, args := range [][]string{{"eval", "-rotations", "0"}, {"eval", "a.jsonl", "b.jsonl"}, {"eval", "-nope"}, {"eval", "-temperature", "-1"}} {
		if code, _, errOut := runCmd(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %s)", args, code, errOut)
		}
	}
	code, _, errOut := runCmd(t, `{"state": "s", "questions": {"q": {"type": "noul"}}, "expected": {"q": 1}}`, "eval")
	if code != 1 || !strings.Contains(errOut, "line 1: expected.q") {
		t.Errorf("bad label: exit %d, stderr %s", code, errOut)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(10, 40, 5*time.Second)
	if want := "10/40 [=======                       ] 2.0 lines/s, 15s left "; got != want {
		t.Errorf("progress %q, want %q", got, want)
	}
	if got := progressLine(0, 3, 0); !strings.Contains(got, "? left") {
		t.Errorf("progress at start %q", got)
	}
}

// TestEvalCompare runs kev eval -dtype float32 -compare bfloat16 on the bundled checkpoint: its JSON report must be
// the library's float32 report with eval.Compare of the bfloat16 one beside it, and the table must end with the two
// runs side by side. A -compare type the device refuses is an error naming the flag.
func TestEvalCompare(t *testing.T) {
	root := filepath.Join("..", "..")
	input := filepath.Join(root, "eval", "testdata", "tickets.jsonl")
	out := filepath.Join(t.TempDir(), "report.json")
	code, _, errOut := runCmd(t, "", "eval", "-dtype", "float32", "-compare", "bfloat16", "-json", "-svg", "none", "-o", out, input)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got eval.Report
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	c := got.Compare
	if c == nil || c.First != "float32" || c.Second != "bfloat16" || c.Questions != got.Overall.N || c.Questions == 0 ||
		c.MaxDelta <= 0 || c.MaxDelta > 0.05 || c.Agreement < 0 || c.Agreement > 1 {
		t.Fatalf("compare: %+v, want float32 beside bfloat16 over every question, 0 < max |Δp| ≤ 0.05", c)
	}

	reports := map[kev.DType]*eval.Report{}
	for _, dt := range []kev.DType{kev.Float32, kev.BFloat16} {
		p, err := kev.Load(context.Background(), filepath.Join(root, "testdata", "golden", bundledRun),
			kev.Options{Base: filepath.Join(root, "testdata", "golden", bundledBase), DType: dt})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(input)
		if err != nil {
			t.Fatal(err)
		}
		reports[dt], err = eval.Run(context.Background(), p, f, eval.Options{})
		f.Close()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := reports[kev.Float32]
	if want.Compare, err = eval.Compare(want, reports[kev.BFloat16], "float32", "bfloat16"); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.MarshalIndent(want, "", "  ")
	if string(wantJSON)+"\n" != string(data) {
		t.Errorf("kev eval -compare wrote\n%s\nthe library reports\n%s", data, wantJSON)
	}

	code, table, errOut := runCmd(t, "", "eval", "-compare", "bf16", "-svg", "none", input)
	if code != 0 || !strings.Contains(table, "compare     float32  bfloat16\n") || !strings.Contains(table, "\nlog loss ") ||
		!strings.Contains(table, "\nBrier ") || !strings.Contains(table, "argmax agreement 20/20") {
		t.Errorf("exit %d, table\n%s\nstderr %s", code, table, errOut)
	}

	code, _, errOut = runCmd(t, "", "eval", "-compare", "fp8", "-svg", "none", input)
	if code != 1 || !strings.Contains(errOut, "-compare fp8") || !strings.Contains(errOut, "compute capability 9.0") {
		t.Errorf("-compare fp8 on the cpu: exit %d, stderr %s", code, errOut)
	}
}
