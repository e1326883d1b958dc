package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
	kevcpu "github.com/kevgo/kev/tensor/cpu"
)

// TestBenchCPUBF16OneCase runs kev bench as the CPU side-by-side script does (-device cpu -dtype bf16, no
// concurrency sweep, one case picked by index) and checks the report: the one case only, bf16 probabilities bit for
// bit against the library's bf16 predictor, no levels, and where and how it ran.
func TestBenchCPUBF16OneCase(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.json")
	code, _, errText := runCmd(t, "", "bench", "-device", "cpu", "-dtype", "bf16", "-cases", benchCases, "-case", "2",
		"-runs", "2", "-warmup", "1", "-clients", "", "-out", out)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errText)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		benchReport
		GOMAXPROCS    int      `json:"gomaxprocs"`
		HostCPU       hostCPU  `json:"host_cpu"`
		CasesSelected []string `json:"cases_selected"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, data)
	}
	if rep.Device != "cpu" || rep.DType != "bfloat16" || rep.Runs != 2 || rep.Warmup != 1 {
		t.Errorf("header: device %q dtype %q runs %d warmup %d", rep.Device, rep.DType, rep.Runs, rep.Warmup)
	}
	if rep.Concurrency == nil || len(rep.Concurrency) != 0 {
		t.Errorf("concurrency %v, want [] with -clients \"\"", rep.Concurrency)
	}
	const want = "3 questions" // the second case of the file
	if len(rep.Latency) != 1 || len(rep.Probabilities) != 1 || !slices.Equal(rep.CasesSelected, []string{want}) {
		t.Fatalf("latency %v, probabilities for %d cases, cases_selected %q; want %q only", rep.Latency,
			len(rep.Probabilities), rep.CasesSelected, want)
	}
	if l := rep.Latency[want]; l.New.Runs != 2 || l.Cached.Runs != 2 || l.Cached.Hits != 2 || l.NewMS <= 0 {
		t.Errorf("latency %+v", l)
	}

	h := rep.HostCPU
	if h.GOMAXPROCS != runtime.GOMAXPROCS(0) || rep.GOMAXPROCS != h.GOMAXPROCS || h.LogicalCPUs != runtime.NumCPU() {
		t.Errorf("host_cpu %+v, gomaxprocs %d; this process: GOMAXPROCS %d, NumCPU %d", h, rep.GOMAXPROCS,
			runtime.GOMAXPROCS(0), runtime.NumCPU())
	}
	if slices.Contains(h.Features, "avx2") != cpu.X86.HasAVX2 || slices.Contains(h.Features, "avx512f") != cpu.X86.HasAVX512F {
		t.Errorf("features %q; the processor: avx2 %v, avx512f %v", h.Features, cpu.X86.HasAVX2, cpu.X86.HasAVX512F)
	}
	if h.Model != cpuModel("/proc/cpuinfo") {
		t.Errorf("model %q, /proc/cpuinfo says %q", h.Model, cpuModel("/proc/cpuinfo"))
	}
	if h.Kernel == nil || *h.Kernel != kevcpu.Kernels() {
		t.Errorf("host_cpu.kernel %v, want %q", h.Kernel, kevcpu.Kernels())
	}

	cases, err := readCases(benchCases)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kev.Load(context.Background(), repoTinyA("kev"), kev.Options{Base: repoTinyA("base"), DType: "bf16"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wantP, err := bridge.Predictor(p).Probabilities(context.Background(), cases[1].request(0))
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Probabilities[want].Probabilities
	if len(got) != len(wantP) {
		t.Fatalf("%d probability lists, want %d", len(got), len(wantP))
	}
	for q := range wantP {
		if len(got[q]) != len(wantP[q]) {
			t.Fatalf("question %d: %d options, want %d", q, len(got[q]), len(wantP[q]))
		}
		for k, v := range got[q] {
			if math.Float32bits(float32(v)) != math.Float32bits(wantP[q][k]) {
				t.Errorf("question %d option %d: reported %v, the bf16 library gives %v", q, k, v, wantP[q][k])
			}
		}
	}
}

// TestBenchCaseErrors checks that a -case naming no case of the file is refused with the file, the case and the
// choices.
func TestBenchCaseErrors(t *testing.T) {
	for _, c := range []struct{ arg, want string }{
		{"0", `case "0": no such case: want a name or an index 1..2 of "2 questions", "3 questions"`},
		{"3", `case "3": no such case`},
		{"2 question", `case "2 question": no such case`},
	} {
		code, _, errText := runCmd(t, "", "bench", "-cases", benchCases, "-case", c.arg, "-clients", "")
		if code == 0 || !strings.Contains(errText, c.want) || !strings.Contains(errText, benchCases) {
			t.Errorf("-case %q: exit %d, stderr %q; want an error containing %q", c.arg, code, errText, c.want)
		}
	}
	code, _, errText := runCmd(t, "", "bench", "-cases", benchCases, "-case", " ")
	if code != 2 || !strings.Contains(errText, "empty case name") {
		t.Errorf("-case \" \": exit %d, stderr %q", code, errText)
	}
}

// TestCaseSelection checks -case picking: names and indices, repeated, kept in the file's order.
func TestCaseSelection(t *testing.T) {
	cases := []benchCase{{name: "a"}, {name: "2"}, {name: "c"}}
	for _, c := range []struct {
		sel  caseSelection
		want []string
	}{
		{nil, []string{"a", "2", "c"}},
		{caseSelection{"c", "1"}, []string{"a", "c"}},
		{caseSelection{"2"}, []string{"2"}}, // a name wins over an index
		{caseSelection{"3", "c", "3"}, []string{"c"}},
	} {
		got, err := c.sel.pick("f.json", cases)
		if err != nil {
			t.Fatalf("%q: %v", c.sel, err)
		}
		var names []string
		for _, x := range got {
			names = append(names, x.name)
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("%q: picked %q, want %q", c.sel, names, c.want)
		}
	}
	_, err := caseSelection{"4"}.pick("f.json", cases)
	var ce *CasesError
	if !errors.As(err, &ce) || ce.File != "f.json" || ce.Case != "4" {
		t.Errorf("index 4 of 3: %v", err)
	}
}

// TestCPUModel reads the model name from cpuinfo files.
func TestCPUModel(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ text, want string }{
		"intel": {"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t: fpu\n\n" +
			"processor\t: 1\nmodel name\t: other\n", "Intel(R) Xeon(R) Platinum 8480+"},
		"none":  {"processor\t: 0\nCPU part\t: 0xd0c\n", ""},
		"empty": {"", ""},
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := cpuModel(path); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
	if got := cpuModel(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}

// cutModel answers as its model does until its n-th Do, which cancels the bench's context and fails as a request
// cut by SIGTERM does.
type cutModel struct {
	bridge.Model
	n, calls int
	cancel   context.CancelFunc
}

func (m *cutModel) Do(ctx context.Context, req *systemone.Request) (*systemone.Response, error) {
	m.calls++
	if m.calls == m.n {
		m.cancel()
		return nil, ctx.Err()
	}
	return m.Model.Do(ctx, req)
}

// TestBenchCutKeepsTimedRuns checks that a case cut during its timed runs keeps the runs it finished: with one
// warm-up and 5 runs of each kind, Do number 11 is the third timed cached run (1: the first request, 2 and 3: the
// warm-ups, 4 to 8: the new states), so 5 new and 2 cached runs are reported, and the error is returned.
func TestBenchCutKeepsTimedRuns(t *testing.T) {
	p, err := kev.Load(context.Background(), repoTinyA("kev"), kev.Options{Base: repoTinyA("base")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cases, err := readCases(benchCases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &cutModel{Model: bridge.Predictor(p), n: 11, cancel: cancel}
	b := &bench{p: p, m: m, cfg: benchConfig{runs: 5, warmup: 1}, start: time.Now(), ctx: ctx}
	lat, probs, err := b.runCase(cases[0], time.Time{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want the cancelled context's", err)
	}
	if probs == nil || lat == nil {
		t.Fatalf("latency %v, probabilities %v", lat, probs)
	}
	data, err := json.Marshal(lat)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		FirstMS  float64  `json:"first_ms"`
		NewMS    *float64 `json:"new_ms"`
		CachedMS *float64 `json:"cached_ms"`
		New      struct {
			Runs  int  `json:"runs"`
			Model dist `json:"model_ms"`
		} `json:"new"`
		Cached struct {
			Runs  int  `json:"runs"`
			Model dist `json:"model_ms"`
		} `json:"cached"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.FirstMS <= 0 || got.NewMS == nil || got.CachedMS == nil || got.New.Runs != 5 || got.Cached.Runs != 2 ||
		len(got.Cached.Model.All) != 2 || *got.CachedMS != got.Cached.Model.Median || *got.NewMS != got.New.Model.Median {
		t.Errorf("latency after the cut: %s", data)
	}
	if len(b.table) != 0 {
		t.Errorf("a cut case has a table row: %+v", b.table)
	}

	// Cut before any timed run (Do number 3: the cached warm-up): no medians at all, the first request kept.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	b2 := &bench{p: p, m: &cutModel{Model: bridge.Predictor(p), n: 3, cancel: cancel2}, cfg: benchConfig{runs: 5, warmup: 1},
		start: time.Now(), ctx: ctx2}
	lat2, _, err := b2.runCase(cases[0], time.Time{})
	data2, _ := json.Marshal(lat2)
	if err == nil || strings.Contains(string(data2), "new_ms") || strings.Contains(string(data2), "cached_ms") ||
		!strings.Contains(string(data2), "first_ms") {
		t.Errorf("cut in the warm-ups: error %v, latency %s", err, data2)
	}
}
