package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
)

var benchCases = filepath.Join("testdata", "bench-cases.json")

// benchReport is the part of kev bench's report the tests read.
type benchReport struct {
	Run, Device, DType string
	Hardware           string    `json:"hardware"`
	Memory             memReport `json:"memory"`
	Runs               int       `json:"runs"`
	Warmup             int       `json:"warmup"`
	Latency            map[string]struct {
		Tokens      int     `json:"tokens"`
		StateTokens int     `json:"state_tokens"`
		Questions   int     `json:"questions"`
		FirstMS     float64 `json:"first_ms"`
		NewMS       float64 `json:"new_ms"`
		CachedMS    float64 `json:"cached_ms"`
		New, Cached struct {
			Runs     int  `json:"runs"`
			Hits     int  `json:"hits"`
			Model    dist `json:"model_ms"`
			Wall     dist `json:"wall_ms"`
			Tokenize dist `json:"tokenize_ms"`
		}
	} `json:"latency"`
	Probabilities map[string]struct {
		StateText     string          `json:"state_text"`
		Probabilities [][]float64     `json:"probabilities"`
		Answers       json.RawMessage `json:"answers"`

		NewStateExample struct {
			StateText     string      `json:"state_text"`
			StateTokens   int         `json:"state_tokens"`
			Probabilities [][]float64 `json:"probabilities"`
		} `json:"new_state_example"`
	} `json:"probabilities"`
	Concurrency []levelResult   `json:"concurrency"`
	Graphs      json.RawMessage `json:"graphs"`
	PrefixCache struct {
		Size, Hits, Misses int
	} `json:"prefix_cache"`
	Notes       []string `json:"notes"`
	Interrupted bool     `json:"interrupted"`
}

// TestBench runs kev bench on the bundled checkpoint with two small cases and checks the report against the
// library: runs and cache hits of each kind, times, the probabilities bit for bit, the answers, the concurrency
// levels and the memory.
func TestBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	code, stdoutText, errText := runCmd(t, "", "bench", "-cases", benchCases, "-runs", "3", "-warmup", "1",
		"-clients", "1,3", "-duration", "300ms", "-out", out)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errText)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, data)
	}
	if strings.Contains(stdoutText, "{") || !strings.Contains(stdoutText, "cached ms") || !strings.Contains(stdoutText, "model p50 ms") {
		t.Errorf("with -out, standard output should hold the tables only:\n%s", stdoutText)
	}
	if i, j := strings.Index(stdoutText, "2 questions"), strings.Index(stdoutText, "clients"); i < 0 || j < i {
		t.Errorf("table: cases first, then the concurrency levels:\n%s", stdoutText)
	}
	if !strings.Contains(errText, "resident ") || !strings.Contains(errText, "go heap in use") {
		t.Errorf("stderr does not report the memory after load:\n%s", errText)
	}
	// The cases keep the file's order.
	if i, j := bytes.Index(data, []byte(`"2 questions": {`)), bytes.Index(data, []byte(`"3 questions": {`)); i < 0 || j < i {
		t.Errorf("cases out of order in the report")
	}
	if rep.Device != "cpu" || rep.DType != "float32" || rep.Runs != 3 || rep.Warmup != 1 || rep.Interrupted {
		t.Errorf("header: device %q dtype %q runs %d warmup %d interrupted %v", rep.Device, rep.DType, rep.Runs, rep.Warmup, rep.Interrupted)
	}
	if string(rep.Graphs) != "null" {
		t.Errorf("graphs %s on the cpu, want null", rep.Graphs)
	}
	if !strings.HasPrefix(rep.Hardware, "CPU: fp32 ") {
		t.Errorf("hardware %q, want the CPU backend's kernels", rep.Hardware)
	}

	p, err := kev.Load(context.Background(), repoTinyA("kev"), kev.Options{Base: repoTinyA("base")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if rep.Memory.Kind != "go_heap" || rep.Memory.ResidentBytes <= 0 || rep.Memory.WeightBytes != p.Info().WeightBytes {
		t.Errorf("memory %+v, weights %d", rep.Memory, p.Info().WeightBytes)
	}

	cases, err := readCases(benchCases)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Latency) != len(cases) || len(rep.Probabilities) != len(cases) {
		t.Fatalf("%d latency and %d probability entries for %d cases", len(rep.Latency), len(rep.Probabilities), len(cases))
	}
	for _, c := range cases {
		l, ok := rep.Latency[c.name]
		if !ok {
			t.Fatalf("no latency for %q", c.name)
		}
		if l.Questions != len(c.req.Questions) || l.StateTokens < 2 || l.Tokens <= l.StateTokens || l.FirstMS <= 0 {
			t.Errorf("%s: questions %d, state tokens %d, tokens %d, first %v ms", c.name, l.Questions, l.StateTokens, l.Tokens, l.FirstMS)
		}
		if l.New.Runs != 3 || l.New.Hits != 0 || l.Cached.Runs != 3 || l.Cached.Hits != 3 {
			t.Errorf("%s: new %d runs %d hits, cached %d runs %d hits; want 3/0 and 3/3", c.name, l.New.Runs, l.New.Hits, l.Cached.Runs, l.Cached.Hits)
		}
		for kind, k := range map[string]struct {
			median float64
			model  dist
			wall   dist
			tok    dist
		}{"new": {l.NewMS, l.New.Model, l.New.Wall, l.New.Tokenize}, "cached": {l.CachedMS, l.Cached.Model, l.Cached.Wall, l.Cached.Tokenize}} {
			if len(k.model.All) != 3 || len(k.wall.All) != 3 || len(k.tok.All) != 3 || k.median != k.model.Median {
				t.Errorf("%s %s: %d/%d/%d samples, median %v vs %v", c.name, kind, len(k.model.All), len(k.wall.All), len(k.tok.All), k.median, k.model.Median)
				continue
			}
			for i := range 3 {
				if k.model.All[i] <= 0 || k.tok.All[i] <= 0 || k.wall.All[i] < k.model.All[i]-0.06 {
					t.Errorf("%s %s run %d: model %v ms, wall %v ms, tokenize %v ms", c.name, kind, i, k.model.All[i], k.wall.All[i], k.tok.All[i])
				}
			}
			if k.model.P10 > k.model.Median || k.model.Median > k.model.P90 || k.model.Min > k.model.P10 || k.model.P90 > k.model.Max {
				t.Errorf("%s %s: min %v p10 %v median %v p90 %v max %v", c.name, kind, k.model.Min, k.model.P10, k.model.Median, k.model.P90, k.model.Max)
			}
		}

		pr := rep.Probabilities[c.name]
		want, err := bridge.Predictor(p).Probabilities(context.Background(), c.request(0))
		if err != nil {
			t.Fatal(err)
		}
		if pr.StateText != c.state || len(pr.Probabilities) != len(want) {
			t.Fatalf("%s: state %q, %d probability lists, want %d", c.name, pr.StateText, len(pr.Probabilities), len(want))
		}
		for q := range want {
			if len(pr.Probabilities[q]) != len(want[q]) {
				t.Fatalf("%s question %d: %d probabilities, want %d", c.name, q, len(pr.Probabilities[q]), len(want[q]))
			}
			for k, v := range pr.Probabilities[q] {
				if float64(float32(v)) != v || math.Float32bits(float32(v)) != math.Float32bits(want[q][k]) {
					t.Errorf("%s question %d option %d: reported %v, the library gives %v", c.name, q, k, v, want[q][k])
				}
			}
		}
		ex := pr.NewStateExample
		want1, err := bridge.Predictor(p).Probabilities(context.Background(), c.request(1))
		if err != nil {
			t.Fatal(err)
		}
		if ex.StateText != "Ticket 1. "+c.state || ex.StateTokens <= l.StateTokens || len(ex.Probabilities) != len(want1) {
			t.Fatalf("%s: new-state example %q, %d tokens, %d lists", c.name, ex.StateText, ex.StateTokens, len(ex.Probabilities))
		}
		for q := range want1 {
			for k, v := range ex.Probabilities[q] {
				if math.Float32bits(float32(v)) != math.Float32bits(want1[q][k]) {
					t.Errorf("%s new state, question %d option %d: reported %v, the library gives %v", c.name, q, k, v, want1[q][k])
				}
			}
		}
		resp, err := bridge.Predictor(p).Do(context.Background(), c.request(0))
		if err != nil {
			t.Fatal(err)
		}
		wantAnswers, _ := json.Marshal(systemone.AnswersValue(resp.Answers))
		var got bytes.Buffer
		if err := json.Compact(&got, pr.Answers); err != nil || got.String() != string(wantAnswers) {
			t.Errorf("%s: answers %s, want %s (%v)", c.name, got.String(), wantAnswers, err)
		}
	}

	if len(rep.Concurrency) != 2 {
		t.Fatalf("%d concurrency levels, want 2", len(rep.Concurrency))
	}
	for i, l := range rep.Concurrency {
		if l.Clients != []int{1, 3}[i] || l.Requests < 1 || l.Errors != 0 || l.RPS <= 0 || l.P50MS <= 0 || l.P99MS < l.P50MS ||
			l.ModelP50MS <= 0 || l.Batches < 1 || l.MeanBatch < 1 || l.DurationS < 0.3 {
			t.Errorf("level %d: %+v", i, l)
		}
		// Every request is a new ticket: none can hit the prefix cache.
		if l.PrefixHits != 0 || l.PrefixMisses != l.Requests {
			t.Errorf("level %d: %d hits, %d misses for %d new tickets", i, l.PrefixHits, l.PrefixMisses, l.Requests)
		}
	}
	if rep.PrefixCache.Size != 4 /* Options.PrefixCache's default */ || rep.PrefixCache.Hits < 2*3 {
		t.Errorf("prefix cache %+v", rep.PrefixCache)
	}
}

// TestBenchStdout checks that without -out the report goes to standard output ahead of the table, and that a
// spent budget shrinks the runs and skips the concurrency levels, saying so.
func TestBenchStdout(t *testing.T) {
	code, out, errText := runCmd(t, "", "bench", "-cases", benchCases, "-runs", "5", "-warmup", "0", "-clients", "2",
		"-budget", "1ms")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errText)
	}
	end := strings.Index(out, "\n}\n")
	if !strings.HasPrefix(out, "{\n") || end < 0 {
		t.Fatalf("standard output does not start with the report:\n%s", out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out[:end+3]), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out[end:], "cached ms") {
		t.Errorf("no table after the report:\n%s", out[end:])
	}
	for name, l := range rep.Latency {
		if l.New.Runs != 3 || l.Cached.Runs != 3 {
			t.Errorf("%s: %d and %d runs under a spent budget, want the minimum 3", name, l.New.Runs, l.Cached.Runs)
		}
	}
	if len(rep.Concurrency) != 0 {
		t.Errorf("concurrency levels ran under a spent budget: %+v", rep.Concurrency)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "timed runs of each kind, not 5 (time budget") || !strings.Contains(notes, "concurrency 2 and above skipped") {
		t.Errorf("notes %q", rep.Notes)
	}
}

// TestBenchProfiles checks that -cpuprofile and -trace write a CPU profile (gzip-compressed, as pprof writes it)
// and an execution trace of the timed requests, and that an unwritable path is an error before anything runs.
func TestBenchProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "exec.trace")
	code, _, errText := runCmd(t, "", "bench", "-cases", benchCases, "-runs", "3", "-warmup", "1", "-clients", "",
		"-out", filepath.Join(dir, "report.json"), "-cpuprofile", cpu, "-trace", tr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errText)
	}
	if b, err := os.ReadFile(cpu); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("CPU profile: %d bytes, %v; want a gzip stream", len(b), err)
	}
	if b, err := os.ReadFile(tr); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("trace: %d bytes, %v; want a Go execution trace", len(b), err)
	}
	code, _, errText = runCmd(t, "", "bench", "-cases", benchCases, "-runs", "3", "-clients", "",
		"-cpuprofile", filepath.Join(dir, "missing", "cpu.pprof"))
	if code != 1 || !strings.Contains(errText, "-cpuprofile") {
		t.Errorf("unwritable profile: exit %d, stderr %q", code, errText)
	}
}

func TestBenchErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	noState := write("nostate.json", `{"cases": {"a": {"state": {"k": 1}, "questions": {"q": {"type": "noul"}}}}}`)
	badQ := write("badq.json", `{"cases": {"ok": {"state": "x", "questions": {"q": {"type": "noul"}}}, "bad": {"state": "x", "questions": {}}}}`)
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help", []string{"-h"}, 0, "-clients"},
		{"missing cases file", []string{"-cases", filepath.Join(dir, "none.json")}, 1, "none.json"},
		{"state not text", []string{"-cases", noState}, 1, `case "a": "state" must be a non-empty string`},
		{"invalid question", []string{"-cases", badQ}, 1, `case "bad"`},
		{"bad clients", []string{"-clients", "1,x"}, 2, `-clients: "x" is not a positive number`},
		{"no runs", []string{"-runs", "0"}, 2, "-runs 0"},
		{"negative warmup", []string{"-warmup", "-1"}, 2, "-warmup -1"},
		{"bad device", []string{"-cases", benchCases, "-device", "tpu"}, 1, "Options.Device"},
		{"stray argument", []string{"cases.json"}, 2, `unexpected argument "cases.json"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errText := runCmd(t, "", append([]string{"bench"}, c.args...)...)
			if code != c.code || !strings.Contains(errText, c.stderr) {
				t.Errorf("exit %d, want %d; stderr %q, want it to contain %q", code, c.code, errText, c.stderr)
			}
		})
	}
}

func TestParseCases(t *testing.T) {
	cs, err := readCasesOrBundled("")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"2 questions, short state", "6 questions, short state", "5 questions, 370-token state", "5 questions, 2,200-token state"}
	if len(cs) != len(names) {
		t.Fatalf("%d cases, want %d", len(cs), len(names))
	}
	dup, err := parseCases("f.json", []byte(`{"cases": {"a": {"state": "x", "questions": {"q": {"type": "noul"}}}, "b": {"state": "z", "questions": {"q": {"type": "noul"}}}, "a": {"state": "y", "questions": {"q": {"type": "noul"}}}}}`))
	if err != nil || len(dup) != 2 || dup[0].name != "a" || dup[0].state != "y" || dup[1].name != "b" {
		t.Errorf("a repeated name keeps its first place and its last value: %v, %v", dup, err)
	}
	for i, c := range cs {
		if c.name != names[i] {
			t.Errorf("case %d: %q, want %q", i, c.name, names[i])
		}
	}
	if n := len(cs[1].req.Questions); n != 6 {
		t.Errorf("%s: %d questions", cs[1].name, n)
	}
	r := cs[0].request(17)
	if got := r.State.AsString(); got != "Ticket 17. "+cs[0].state {
		t.Errorf("request 17: state %q", got)
	}
	if cs[0].req.State.AsString() != cs[0].state || cs[0].request(0).State.AsString() != cs[0].state {
		t.Error("request(i) changed the case's own state")
	}

	for _, c := range []struct{ body, want string }{
		{`[]`, `want an object {"cases"`},
		{`{"cases": {}}`, "at least one case"},
		{`{"cases": {"a": {"state": "", "questions": {"q": {"type": "noul"}}}}}`, `case "a": "state" must be`},
		{`{"cases": `, "cases file f.json: "},
	} {
		_, err := parseCases("f.json", []byte(c.body))
		var ce *CasesError
		if !errors.As(err, &ce) || ce.File != "f.json" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *CasesError containing %q", c.body, err, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	// Values from Python: statistics.median and statistics.quantiles(xs, n=10 or 100, method="inclusive").
	for _, c := range []struct {
		xs               []float64
		median, p10, p90 float64
		p99              float64
	}{
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5.5, 1.9, 9.1, 9.91},
		{[]float64{3.5, 1.25}, 2.375, 1.475, 3.275, 3.4775},
		{[]float64{7}, 7, 7, 7, 7},
		{[]float64{5, 1, 4, 2, 3}, 3, 1.4, 4.6, 4.96},
		{[]float64{0.1, 0.7, 0.3, 12.5, 2.2, 9.9, 4.4}, 2.2, 0.22, 10.94, 12.344},
	} {
		for _, q := range []struct {
			q, want float64
		}{{0.5, c.median}, {0.1, c.p10}, {0.9, c.p90}, {0.99, c.p99}} {
			if got := percentile(c.xs, q.q); math.Abs(got-q.want) > 1e-12 {
				t.Errorf("percentile(%v, %v) = %v, want %v", c.xs, q.q, got, q.want)
			}
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing: %v", got)
	}
	d := summarize([]float64{4.0004, 1, 3})
	if d.Median != 3 || d.Min != 1 || d.Max != 4 || d.Runs != 3 || d.Mean != 2.667 || d.All[0] != 4 {
		t.Errorf("summarize: %+v", d)
	}
}

func TestParseClients(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"1,32,64", []int{1, 32, 64}, false},
		{" 4 , 2", []int{4, 2}, false},
		{"", nil, false},
		{"0", nil, false},
		{"1,0", nil, true},
		{"-3", nil, true},
		{"1,,2", nil, true},
	} {
		got, err := parseClients(c.in)
		if (err != nil) != c.bad || !equalInts(got, c.want) {
			t.Errorf("parseClients(%q) = %v, %v", c.in, got, err)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func FuzzParseCases(f *testing.F) {
	for _, s := range []string{
		`{"cases": {"a": {"state": "x", "questions": {"q": {"type": "noul"}}}}}`,
		`{"cases": {"a": {"state": "x", "questions": {"q": {"type": "choice", "criteria": {"u": null, "v": "w"}}}}}}`,
		`{"cases": {"a": {"state": "x", "questions": {"q": {"type": "score", "criteria": ["lo", "hi"]}}}, "b": 3}}`,
		`{"cases": []}`, `{"cases": {"a": {"state": 1}}}`, `{}`, `null`, `{"cases": {"a": {"state": "\ud800"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cs, err := parseCases("fuzz.json", data)
		if err != nil {
			var ce *CasesError
			if !errors.As(err, &ce) || ce.File != "fuzz.json" {
				t.Fatalf("error %v (%T) is not a *CasesError naming the file", err, err)
			}
			return
		}
		if len(cs) == 0 {
			t.Fatal("no cases and no error")
		}
		for _, c := range cs {
			if c.state == "" || c.req == nil || len(c.req.Questions) == 0 {
				t.Fatalf("case %q: state %q, request %v", c.name, c.state, c.req)
			}
			if got := c.request(2).State.AsString(); got != "Ticket 2. "+c.state {
				t.Fatalf("case %q: request(2) state %q", c.name, got)
			}
		}
	})
}
