package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kevgo/kev"
)

// tinyA is a directory of the repository's small random test checkpoint.
func tinyA(dir string) string { return filepath.Join("..", "..", "testdata", "golden", "tiny-a", dir) }

var modelArgs = []string{"-checkpoint", tinyA("kev"), "-base", tinyA("base"), "-questions", filepath.Join("testdata", "questions.json")}

// loadTiny loads the test checkpoint and the questions for computing the answers the tool must write.
func loadTiny(t *testing.T) (*kev.Predictor, []kev.QuestionEntry) {
	t.Helper()
	p, err := kev.Load(context.Background(), tinyA("kev"), kev.Options{Base: tinyA("base")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	qs, err := readQuestions(filepath.Join("testdata", "questions.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p, qs
}

// answersJSON is the answers object the JSONL output holds for state.
func answersJSON(t *testing.T, p *kev.Predictor, qs []kev.QuestionEntry, state any) map[string]any {
	t.Helper()
	answers, err := p.Ask(context.Background(), state, qs...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, a := range answers {
		b, err := a.Answer.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		json.Unmarshal(b, &v)
		out[a.ID] = v
	}
	return out
}

type outLine struct {
	Row     int             `json:"row"`
	ID      json.RawMessage `json:"id"`
	Answers map[string]any  `json:"answers"`
	Error   string          `json:"error"`
}

func readLines(t *testing.T, data []byte) []outLine {
	t.Helper()
	var out []outLine
	for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var o outLine
		if err := json.Unmarshal(l, &o); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, o)
	}
	return out
}

// TestJSONL answers the example JSONL file with four workers and checks every line against the library's own
// answers for the same state, in input order, with the ids carried and progress reported.
func TestJSONL(t *testing.T) {
	p, qs := loadTiny(t)
	var stdout, stderr bytes.Buffer
	args := append(append([]string{}, modelArgs...), "-workers", "4", "-progress", "lines", filepath.Join("testdata", "tickets.jsonl"))
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	got := readLines(t, stdout.Bytes())
	states := []any{
		"I was charged twice for order 1042. Please refund the second charge.",
		"My package has said 'out for delivery' for five days.",
		// Structured state, in the order written: the tool keeps it.
		kev.Object{{Key: "subject", Value: "Wrong size"}, {Key: "message", Value: "The shoes are a 42, I ordered a 44."},
			{Key: "customer", Value: kev.Object{{Key: "plan", Value: "pro"}, {Key: "orders", Value: 17}}}},
		"The app crashes every time I open my order history.",
		"Where can I download my invoice for March?",
	}
	ids := []string{`"T-1001"`, `"T-1002"`, `"T-1003"`, `"T-1004"`, `1006`}
	if len(got) != len(states) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(states), stdout.String())
	}
	for i, g := range got {
		if g.Row != i+1 || string(g.ID) != ids[i] || g.Error != "" {
			t.Errorf("line %d: row %d id %s error %q", i, g.Row, g.ID, g.Error)
		}
		if want := answersJSON(t, p, qs, states[i]); !reflect.DeepEqual(g.Answers, want) {
			t.Errorf("line %d: answers %v, the library answers %v", i, g.Answers, want)
		}
	}
	if !strings.Contains(stderr.String(), "100%  5/5 rows") || !strings.Contains(stderr.String(), "batch: 5 records, 5 answered, 0 failed") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}

// TestCSV answers the example CSV file (a quoted multi-line cell included) into a CSV file.
func TestCSV(t *testing.T) {
	p, qs := loadTiny(t)
	out := filepath.Join(t.TempDir(), "answers.csv")
	var stdout, stderr bytes.Buffer
	args := append(append([]string{}, modelArgs...), "-o", out, "-progress", "off", filepath.Join("testdata", "tickets.csv"))
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	header := []string{"row", "id", "department", "department_p", "escalate", "urgency", "urgency_confidence", "error"}
	if len(recs) != 5 || !reflect.DeepEqual(recs[0], header) {
		t.Fatalf("%q", recs)
	}
	states := []string{"I was charged twice for order 1042. Please refund the second charge.",
		`My package has said "out for delivery" for five days.`, "Do you ship to Iceland, and how long does it take?",
		"The app crashes every time I open\nmy order history."}
	for i, st := range states {
		answers, err := p.Ask(context.Background(), st, qs...)
		if err != nil {
			t.Fatal(err)
		}
		dept, esc, urg := answers[0].Answer, answers[1].Answer, answers[2].Answer
		var pDept float64
		for _, pr := range dept.Probabilities {
			if pr.Key == dept.Choice {
				pDept = pr.P
			}
		}
		want := []string{itoa(i + 1), "T-200" + itoa(i+1), dept.Choice, ftoa(pDept), ftoa(esc.Noul), ftoa(urg.Score), ftoa(urg.Confidence), ""}
		if !reflect.DeepEqual(recs[i+1], want) {
			t.Errorf("record %d: %q, want %q", i+1, recs[i+1], want)
		}
	}
	if stdout.Len() != 0 || strings.Contains(stderr.String(), "rows/s") {
		t.Errorf("stdout %q; progress with -progress off: %q", stdout.String(), stderr.String())
	}
}

// TestBadRecords checks that records without a state are reported on their own lines, the rest still answered,
// and the run fails.
func TestBadRecords(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte("{\"id\": 1, \"text\": \"fine\"}\nnot json\n\n{\"id\": 3, \"subject\": \"no text\"}\n[1, 2]\n{\"id\": 5, \"text\": null}\n"), 0o644)
	var stdout, stderr bytes.Buffer
	err := run(append(append([]string{}, modelArgs...), "-progress", "off", in), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "4 of 5 records failed") {
		t.Fatalf("err %v", err)
	}
	got := readLines(t, stdout.Bytes())
	want := []struct {
		row int
		err string
	}{{1, ""}, {2, "row 2: not valid JSON"}, {4, `row 4: no "text" field`}, {5, "row 5: not a JSON object"}, {6, `row 6: "text" is null`}}
	if len(got) != len(want) {
		t.Fatalf("%s", stdout.String())
	}
	for i, w := range want {
		if got[i].Row != w.row || !strings.HasPrefix(got[i].Error, w.err) || (w.err == "") != (got[i].Answers != nil) {
			t.Errorf("line %d: %+v, want row %d error %q", i, got[i], w.row, w.err)
		}
	}
	if !strings.Contains(stderr.String(), "batch: 5 records, 1 answered, 4 failed") {
		t.Errorf("stderr %q", stderr.String())
	}

	// Whole lines as states (-state ""): any JSON value is a state.
	stdout.Reset()
	os.WriteFile(in, []byte("\"plain text\"\n{\"a\": [1, 2.5, true]}\n"), 0o644)
	if err := run(append(append([]string{}, modelArgs...), "-progress", "off", "-state", "", in), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got := readLines(t, stdout.Bytes()); len(got) != 2 || got[0].Answers == nil || got[1].Answers == nil {
		t.Errorf("%s", stdout.String())
	}
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give one input file"},
		{[]string{"x.jsonl"}, "-checkpoint is required"},
		{[]string{"-checkpoint", "k", "x.jsonl"}, "-questions is required"},
		{[]string{"-checkpoint", "k", "-questions", "q", "x.txt"}, `-format "": want jsonl or csv`},
		{[]string{"-checkpoint", "k", "-questions", "q", "-workers", "0", "x.csv"}, "-workers must be at least 1"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(c.args, &stdout, &stderr)
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	dir := t.TempDir()
	q := filepath.Join(dir, "q.json")
	os.WriteFile(q, []byte(`{"q": {"type": "score", "criteria": []}}`), 0o644)
	var stdout, stderr bytes.Buffer
	err := run([]string{"-checkpoint", tinyA("kev"), "-questions", q, "in.jsonl"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "questions file "+q) || !strings.Contains(err.Error(), "q.criteria") {
		t.Errorf("bad questions: %v", err)
	}
}

func TestProgress(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	p := newProgress(&b, true, 4)
	p.now = func() time.Time { return now }
	p.start = now
	now = now.Add(time.Second)
	p.add(false)
	if got := b.String(); got != "\r[=======>                      ]  25%  1/4 rows  1.0 rows/s  ETA 3s" {
		t.Errorf("%q", got)
	}
	now = now.Add(50 * time.Millisecond)
	p.add(true) // too soon to redraw
	if strings.Count(b.String(), "\r") != 1 {
		t.Errorf("redrawn within 100 ms: %q", b.String())
	}
	now = now.Add(time.Second)
	p.add(false)
	p.width = 80 // as after a longer line: the next one blanks out the rest
	p.add(false) // the last one always draws
	p.finish()
	last := "[==============================] 100%  4/4 rows  2.0 rows/s  (1 failed)"
	if !strings.HasSuffix(b.String(), "\r[======================>       ]  75%  3/4 rows  1.5 rows/s  (1 failed)"+
		"\r"+last+strings.Repeat(" ", 80-len(last))+"\n") {
		t.Errorf("%q", b.String())
	}

	b.Reset()
	lines := newProgress(&b, false, 20)
	for range 20 {
		lines.add(false)
	}
	if n := strings.Count(b.String(), "\n"); n != 10 || strings.Contains(b.String(), "\r") {
		t.Errorf("lines mode printed %d lines:\n%s", n, b.String())
	}
}

// TestProgram builds the tool as a user does and runs it on the README's example.
func TestProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program: runs without -short")
	}
	bin := filepath.Join(t.TempDir(), "batch")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append(append([]string{}, modelArgs...), filepath.Join("testdata", "tickets.jsonl"))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if got := readLines(t, out); len(got) != 5 || got[4].Row != 5 || got[4].Answers == nil {
		t.Errorf("%s", out)
	}
	if !strings.Contains(stderr.String(), "5/5 rows") {
		t.Errorf("stderr %q", stderr.String())
	}
	cmd = exec.Command(bin, "-checkpoint", tinyA("kev"))
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("usage error: %v", err)
	}
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
