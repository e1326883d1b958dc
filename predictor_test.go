package kev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kevgo/kev/internal/systemone"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/hub"
	"github.com/kevgo/kev/internal/pyjson"
)

// The golden fixtures (scripts/golden/FORMAT.md): tiny Kev checkpoints and, per case, the request bytes and what
// the PyTorch reference answered.

const probTol = 1e-4

type goldenCase struct {
	Name          string          `json:"name"`
	Request       json.RawMessage `json:"request"`
	InputTokens   int             `json:"input_tokens"`
	Probabilities [][]float32     `json:"probabilities"`
	AnswersJSON   string          `json:"answers_json"`
	OutputTokens  int             `json:"output_tokens"`
}

type goldenFile struct {
	Fixture     string       `json:"fixture"`
	Temperature float64      `json:"temperature"`
	Cases       []goldenCase `json:"cases"`
}

// goldenSet is one checkpoint and its reference cases.
type goldenSet struct {
	name, kev, base, cases string
}

// shortCases returns the first n cases under -short (the quick loop), else all of them.
func shortCases[T any](cases []T, n int) []T {
	if testing.Short() && len(cases) > n {
		return cases[:n]
	}
	return cases
}

func goldenSets(t testing.TB) []goldenSet {
	t.Helper()
	root := filepath.Join("testdata", "golden")
	var sets []goldenSet
	for _, fx := range []string{"tiny-a", "tiny-b", "tiny-qwen3", "tiny-qwen2"} {
		dir := filepath.Join(root, fx)
		if _, err := os.Stat(filepath.Join(dir, "reference", "cases.json")); err != nil {
			continue
		}
		sets = append(sets, goldenSet{fx, filepath.Join(dir, "kev"), filepath.Join(dir, "base"), filepath.Join(dir, "reference", "cases.json")})
		if _, err := os.Stat(filepath.Join(dir, "reference", "cases-full.json")); err == nil {
			sets = append(sets, goldenSet{fx + "/kev-full", filepath.Join(dir, "kev-full"), "", filepath.Join(dir, "reference", "cases-full.json")})
		}
	}
	if len(sets) == 0 {
		t.Skip("golden fixtures not present")
	}
	return sets
}

func readGolden(t testing.TB, path string) *goldenFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &g
}

func loadGolden(t testing.TB, s goldenSet, opts Options) *Predictor {
	t.Helper()
	opts.Base = s.base
	p, err := Load(context.Background(), s.kev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func decode(t testing.TB, raw []byte) *systemone.Request {
	t.Helper()
	req, err := systemone.DecodeRequest(raw)
	if err != nil {
		t.Fatalf("request %s: %v", raw, err)
	}
	return req
}

func compactAnswers(t testing.TB, a []systemone.AnswerEntry) string {
	t.Helper()
	b, err := pyjson.Compact(systemone.AnswersValue(a))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPredictorGolden runs every reference request through Do and compares the probabilities, the token counts and
// the response bytes with the reference.
func TestPredictorGolden(t *testing.T) {
	exact, total := 0, 0
	var worst float64
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			g := readGolden(t, s.cases)
			p := loadGolden(t, s, Options{})
			for _, c := range shortCases(g.Cases, 2) {
				total++
				req := decode(t, c.Request)
				rec, enc, r, err := p.submit(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				resp, err := p.respond(req, rec, enc, r)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				if len(r.probs) != len(c.Probabilities) {
					t.Fatalf("%s: %d questions answered, want %d", c.Name, len(r.probs), len(c.Probabilities))
				}
				for q := range c.Probabilities {
					if len(r.probs[q]) != len(c.Probabilities[q]) {
						t.Fatalf("%s q%d: %d probabilities, want %d", c.Name, q, len(r.probs[q]), len(c.Probabilities[q]))
					}
					for j, want := range c.Probabilities[q] {
						d := math.Abs(float64(r.probs[q][j]) - float64(want))
						worst = math.Max(worst, d)
						if !(d <= probTol) {
							t.Errorf("%s q%d p[%d] = %v, want %v", c.Name, q, j, r.probs[q][j], want)
						}
					}
				}
				if resp.Usage.InputTokens != c.InputTokens {
					t.Errorf("%s: input_tokens %d, want %d", c.Name, resp.Usage.InputTokens, c.InputTokens)
				}
				// The reference probabilities through our answers code give the reference bytes exactly.
				refAnswers, err := systemone.ToAnswers(rec, c.Probabilities)
				if err != nil {
					t.Fatal(err)
				}
				if got := compactAnswers(t, refAnswers); got != c.AnswersJSON {
					t.Errorf("%s: answers from the reference probabilities:\n got %s\nwant %s", c.Name, got, c.AnswersJSON)
				}
				if n := systemone.OutputTokens(p.tok, refAnswers); n != c.OutputTokens {
					t.Errorf("%s: output_tokens of the reference answers %d, want %d", c.Name, n, c.OutputTokens)
				}
				// Our probabilities give the same bytes unless a rounded value lies across a rounding boundary
				// from the reference's, which the raw probabilities decide.
				if sameRounding(resp.Answers, refAnswers) {
					exact++
					body, err := resp.MarshalJSON()
					if err != nil {
						t.Fatal(err)
					}
					model, _ := json.Marshal(req.ModelName())
					want := fmt.Sprintf(`{"model":%s,"answers":%s,"usage":{"input_tokens":%d,"output_tokens":%d},"latency_ms":`,
						model, c.AnswersJSON, c.InputTokens, c.OutputTokens)
					if !bytes.HasPrefix(body, []byte(want)) {
						t.Errorf("%s: response\n got %s\nwant %s…", c.Name, body, want)
					}
				} else {
					t.Logf("%s: a rounded value crosses a rounding boundary: got %s, reference %s", c.Name,
						compactAnswers(t, resp.Answers), c.AnswersJSON)
					checkOneStep(t, c.Name, resp.Answers, refAnswers)
				}
			}
		})
	}
	t.Logf("%d cases: probabilities max |Δ| %.3g; %d compared byte for byte", total, worst, exact)
}

// sameRounding reports whether two answer lists have the same rounded values.
func sameRounding(a, b []systemone.AnswerEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].Answer, b[i].Answer
		if a[i].ID != b[i].ID || x.Choice != y.Choice || x.Noul != y.Noul || x.Score != y.Score || x.Confidence != y.Confidence ||
			len(x.Probabilities) != len(y.Probabilities) {
			return false
		}
		for j := range x.Probabilities {
			if x.Probabilities[j] != y.Probabilities[j] {
				return false
			}
		}
	}
	return true
}

// checkOneStep asserts that answers differing in rounding differ by at most one rounding step per value.
func checkOneStep(t *testing.T, name string, a, b []systemone.AnswerEntry) {
	t.Helper()
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1.0001e-4 }
	for i := range a {
		x, y := a[i].Answer, b[i].Answer
		ok := near(x.Noul, y.Noul) && near(x.Score, y.Score) && near(x.Confidence, y.Confidence) && len(x.Probabilities) == len(y.Probabilities)
		for j := 0; ok && j < len(x.Probabilities); j++ {
			ok = near(x.Probabilities[j].P, y.Probabilities[j].P)
		}
		if !ok {
			t.Errorf("%s %s: answer %+v, reference %+v", name, a[i].ID, x, y)
		}
	}
}

// probs runs a request and returns its raw probabilities.
func probs(t testing.TB, p *Predictor, req *systemone.Request) [][]float32 {
	t.Helper()
	_, _, r, err := p.submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r.probs
}

func equalProbs(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func goldenRequests(t testing.TB, s goldenSet) []*systemone.Request {
	t.Helper()
	var reqs []*systemone.Request
	for _, c := range readGolden(t, s.cases).Cases {
		reqs = append(reqs, decode(t, c.Request))
	}
	return reqs
}

// smallRequests are the golden requests of at most 300 tokens, for tests that run many.
func smallRequests(t testing.TB, s goldenSet) []*systemone.Request {
	t.Helper()
	var reqs []*systemone.Request
	for _, c := range readGolden(t, s.cases).Cases {
		if c.InputTokens <= 300 {
			reqs = append(reqs, decode(t, c.Request))
		}
	}
	if len(reqs) < 3 {
		t.Fatalf("%d small golden requests", len(reqs))
	}
	return reqs
}

// TestPrefixCache checks that a cached state gives the same answers as a fresh one and that the counters move as
// Kev's do: per request with a cacheable state, hits and misses; LRU eviction at the size bound.
func TestPrefixCache(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := smallRequests(t, s)
	uncached := loadGolden(t, s, Options{PrefixCache: -1})
	p := loadGolden(t, s, Options{PrefixCache: 2})

	want := probs(t, uncached, reqs[0])
	if st := uncached.Stats().PrefixCache; st.Size != 0 || st.Hits+st.Misses+st.CachedStates != 0 {
		t.Errorf("disabled cache stats %+v", st)
	}
	type counts struct{ hits, misses, cached int }
	step := func(req *systemone.Request, wantHit bool, c counts) {
		t.Helper()
		_, _, r, err := p.submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if r.hit != wantHit {
			t.Errorf("hit = %v, want %v", r.hit, wantHit)
		}
		st := p.Stats().PrefixCache
		if (counts{st.Hits, st.Misses, st.CachedStates}) != c {
			t.Errorf("stats %+v, want hits %d misses %d cached %d", st, c.hits, c.misses, c.cached)
		}
	}
	step(reqs[0], false, counts{0, 1, 1})
	step(reqs[0], true, counts{1, 1, 1})
	if got := probs(t, p, reqs[0]); !equalProbs(got, want) {
		t.Errorf("cached prefix: %v, uncached %v", got, want)
	}
	step(reqs[1], false, counts{2, 2, 2})
	step(reqs[2], false, counts{2, 3, 2}) // evicts reqs[0], the least recent
	step(reqs[0], false, counts{2, 4, 2})
	step(reqs[2], true, counts{3, 4, 2})
	if st := p.Stats(); st.Batches.Count != 7 || st.Batches.Requests != 7 || st.Batches.Queued != 0 || st.Graphs != nil {
		t.Errorf("batch stats %+v", st)
	}
	for i, req := range reqs {
		if got, want := probs(t, p, req), probs(t, uncached, req); !equalProbs(got, want) {
			t.Errorf("request %d: cached run %v, uncached %v", i, got, want)
		}
	}

	// A state below the minimum is never cached nor counted.
	small := loadGolden(t, s, Options{PrefixMinTokens: 1 << 20})
	probs(t, small, reqs[0])
	probs(t, small, reqs[0])
	if st := small.Stats().PrefixCache; st.Hits+st.Misses+st.CachedStates != 0 || st.MinStateTokens != 1<<20 || st.MaxTokens != 65536 || st.Size != 4 {
		t.Errorf("stats %+v", st)
	}
}

// TestBatchSharesState runs one batch holding the same state twice and a different one (of a size within
// preemptRatio of the first's, so that they share a batch): one batch, answers as when run alone, and the counters
// per request.
func TestBatchSharesState(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	release := make(chan struct{})
	first := true
	testBeforeTake = func(int) {
		if first {
			first = false
			<-release
		}
	}
	p := loadGolden(t, s, Options{})
	testBeforeTake = nil
	order := []int{0, 2, 0}
	got := make([][][]float32, len(order))
	var wg sync.WaitGroup
	for i, k := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = probs(t, p, reqs[k])
		}()
	}
	waitAccepted(t, p, len(order))
	close(release)
	wg.Wait()
	for i, k := range order {
		if want := probs(t, alone, reqs[k]); !equalProbs(got[i], want) {
			t.Errorf("request %d in a batch: %v, alone %v", i, got[i], want)
		}
	}
	st := p.Stats()
	if st.Batches.Count != 1 || st.Batches.Requests != 3 || st.PrefixCache.Misses != 3 || st.PrefixCache.CachedStates != 2 {
		t.Errorf("stats %+v", st)
	}
}

func waitAccepted(t testing.TB, p *Predictor, n int) {
	t.Helper()
	for { // no deadline of its own: a request that never comes hangs the test until go test's -timeout
		p.mu.Lock()
		a := p.accepted
		p.mu.Unlock()
		if a >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// submitConcurrently sends goroutines × each requests, each picked at random from reqs, from goroutines goroutines at
// once, and checks that every answer is want's (the request's answers alone). It returns how many requests each
// goroutine had answered when it stopped.
func submitConcurrently(t *testing.T, p *Predictor, reqs []*systemone.Request, want [][][]float32, goroutines, each int) []int {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	picks := make([][]int, goroutines)
	for g := range picks {
		for range each {
			picks[g] = append(picks[g], rng.IntN(len(reqs)))
		}
	}
	answered := make([]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range picks[g] {
				_, _, r, err := p.submit(context.Background(), reqs[k])
				if err != nil {
					t.Error(err)
					return
				}
				if !equalProbs(r.probs, want[k]) {
					t.Errorf("goroutine %d request %d: %v, alone %v", g, k, r.probs, want[k])
				}
				answered[g]++
			}
		}()
	}
	wg.Wait()
	return answered
}

// TestConcurrentAsk sends requests on mixed states from many goroutines: each gets exactly the answers it gets
// alone.
func TestConcurrentAsk(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := smallRequests(t, s)
	seq := loadGolden(t, s, Options{PrefixCache: -1})
	want := make([][][]float32, len(reqs))
	for i, r := range reqs {
		want[i] = probs(t, seq, r)
	}
	p := loadGolden(t, s, Options{PrefixCache: 3, MaxBatch: 8})
	goroutines, each := 16, 3
	if testing.Short() {
		goroutines, each = 4, 2
	}
	submitConcurrently(t, p, reqs, want, goroutines, each)
	st := p.Stats()
	if st.Batches.Requests != goroutines*each || st.PrefixCache.Hits+st.PrefixCache.Misses != goroutines*each {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d requests in %d batches; prefix cache %d hits, %d misses", st.Batches.Requests, st.Batches.Count,
		st.PrefixCache.Hits, st.PrefixCache.Misses)
}

// TestCloseDrains closes a predictor with requests queued behind a running one: all of them are answered, and
// every later call fails with ErrClosed.
func TestCloseDrains(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := smallRequests(t, s)
	release := make(chan struct{})
	first := true
	testBeforeTake = func(int) {
		if first {
			first = false
			<-release
		}
	}
	p, err := Load(context.Background(), s.kev, Options{Base: s.base, MaxBatch: 3})
	testBeforeTake = nil
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			resp, err := p.Do(context.Background(), fromSysRequest(reqs[i%len(reqs)]))
			if err == nil && len(resp.Answers) == 0 {
				err = errors.New("no answers")
			}
			errs <- err
		}()
	}
	waitAccepted(t, p, n)
	closed := make(chan error)
	go func() { closed <- p.Close() }()
	for !p.isClosed() {
		time.Sleep(time.Millisecond)
	}
	if _, err := p.Ask(context.Background(), "late", Noul("q", "?")); !errors.Is(err, ErrClosed) {
		t.Errorf("Ask while closing: %v, want ErrClosed", err)
	}
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("queued request: %v", err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Batches.Requests != n || st.Batches.Count < n/3 {
		t.Errorf("stats %+v", st)
	}
	if _, err := p.Do(context.Background(), fromSysRequest(reqs[0])); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCancelWhileQueued cancels a request waiting behind a running batch: Do returns the context's error and the
// model skips the request.
func TestCancelWhileQueued(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	release := make(chan struct{})
	first := true
	testBeforeTake = func(int) {
		if first {
			first = false
			<-release
		}
	}
	p := loadGolden(t, s, Options{})
	testBeforeTake = nil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { _, err := p.Do(ctx, fromSysRequest(reqs[0])); done <- err }()
	waitAccepted(t, p, 1)
	go func() { _, err := p.Do(context.Background(), fromSysRequest(reqs[1])); done <- err }()
	waitAccepted(t, p, 2)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Batches.Requests != 1 || st.PrefixCache.Misses != 1 {
		t.Errorf("stats %+v", st)
	}
	// A context already done never queues.
	if _, err := p.Do(ctx, fromSysRequest(reqs[0])); !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v", err)
	}
}

func TestDoAdmission(t *testing.T) {
	s := goldenSets(t)[0]
	p := loadGolden(t, s, Options{})
	long := strings.Repeat("a b ", systemone.MaxStateTokens/2+10)
	_, err := p.Ask(context.Background(), long, Noul("q", "?"))
	var st *StateTooLongError
	if !errors.As(err, &st) || st.Limit != systemone.MaxStateTokens {
		t.Fatalf("long state: %v", err)
	}
	if detail, ok := systemone.AdmissionDetail(err); !ok || !strings.Contains(detail, "KEV_TRUNCATE_STATES=1") {
		t.Errorf("detail %q, %v", detail, ok)
	}
	var ve *ValidationError
	if _, err := p.Do(context.Background(), &Request{State: Text("x")}); !errors.As(err, &ve) {
		t.Errorf("no questions: %v", err)
	}
	if st := p.Stats(); st.Batches.Count != 0 || st.Batches.Requests != 0 {
		t.Errorf("refused requests ran: %+v", st)
	}

	// In truncate mode every response says whether it was cut and carries the state counts.
	tp := loadGolden(t, s, Options{TruncateStates: true, Temperature: 1})
	req := goldenRequests(t, s)[0]
	resp, err := tp.Do(context.Background(), fromSysRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := resp.MarshalJSON()
	if resp.Truncated == nil || *resp.Truncated || resp.Usage.StateTokens == 0 || resp.Usage.StateTokens != resp.Usage.StateTokensUsed ||
		!bytes.Contains(body, []byte(`"truncated":false`)) {
		t.Errorf("truncate mode response %s", body)
	}
	if tp.Info().Temperature != 1 || !tp.Info().TruncateStates {
		t.Errorf("info %+v", tp.Info())
	}
}

func TestInfo(t *testing.T) {
	s := goldenSets(t)[0]
	p := loadGolden(t, s, Options{})
	fi, err := os.Stat(filepath.Join(s.kev, "head.pt"))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Info()
	want := Info{Run: s.kev, Base: "Qwen/Qwen3.5-Tiny-A-Base", LoRA: 8, Device: "cpu", Replicas: 1, Backend: "go", DType: "float32",
		Temperature: 2.41, MaxStateTokens: 65536, ReleaseDate: fi.ModTime().Format("2006-01-02")}
	want.BaseRevision, want.WeightBytes, want.Hardware = got.BaseRevision, got.WeightBytes, got.Hardware
	if got != want {
		t.Errorf("Info\n got %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(got.Hardware, "CPU: fp32 ") || !strings.Contains(got.Hardware, " threads") {
		t.Errorf("Hardware %q, want the CPU backend's kernels and threads", got.Hardware)
	}
	if len(got.BaseRevision) != 40 || got.WeightBytes < 100_000 {
		t.Errorf("base revision %q, weight bytes %d", got.BaseRevision, got.WeightBytes)
	}
	bf := loadGolden(t, s, Options{DType: "bf16"})
	if bf.Info().DType != "bfloat16" || bf.Info().WeightBytes >= got.WeightBytes {
		t.Errorf("bf16 info %+v", bf.Info())
	}
	h := loadGolden(t, s, Options{DType: "float16"})
	if h.Info().DType != "float16" || h.Info().WeightBytes != bf.Info().WeightBytes {
		t.Errorf("fp16 info %+v", h.Info())
	}
	// bf16 and fp16 weights stay close to the fp32 answers (fp16 closer: three more mantissa bits).
	req := goldenRequests(t, s)[0]
	a, b, c := probs(t, p, req), probs(t, bf, req), probs(t, h, req)
	for q := range a {
		for j := range a[q] {
			if d := math.Abs(float64(a[q][j] - b[q][j])); d > 0.05 {
				t.Errorf("bf16 q%d p[%d] = %v, fp32 %v", q, j, b[q][j], a[q][j])
			}
			if d := math.Abs(float64(a[q][j] - c[q][j])); d > 0.01 {
				t.Errorf("fp16 q%d p[%d] = %v, fp32 %v", q, j, c[q][j], a[q][j])
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	s := goldenSets(t)[0]
	ctx := context.Background()
	tmp := t.TempDir()
	copyDir := func(src, dst string) {
		t.Helper()
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	kev := filepath.Join(tmp, "kev")
	copyDir(s.kev, kev)
	base := filepath.Join(tmp, "base")
	copyDir(s.base, base)
	noHead := filepath.Join(tmp, "nohead")
	copyDir(s.kev, noHead)
	os.Remove(filepath.Join(noHead, "head.pt"))
	badHead := filepath.Join(tmp, "badhead")
	copyDir(s.kev, badHead)
	os.WriteFile(filepath.Join(badHead, "head.pt"), []byte("not a torch archive"), 0o644)
	noTok := filepath.Join(tmp, "notok")
	copyDir(s.base, noTok)
	os.Remove(filepath.Join(noTok, "tokenizer.json"))
	badShard := filepath.Join(tmp, "badshard")
	copyDir(s.base, badShard)
	shards, _ := filepath.Glob(filepath.Join(badShard, "model-00002-*.safetensors"))
	if len(shards) != 1 {
		t.Fatalf("shards %v", shards)
	}
	os.WriteFile(shards[0], []byte{1, 2, 3}, 0o644)
	badAdapter := filepath.Join(tmp, "badadapter")
	copyDir(s.kev, badAdapter)
	os.WriteFile(filepath.Join(badAdapter, "adapter_config.json"), []byte(`{"r": "eight"}`), 0o644)

	t.Setenv("HF_HUB_CACHE", filepath.Join(tmp, "hub"))
	missing := filepath.Join(tmp, "missing")
	for _, c := range []struct {
		name, kev, base, file string
	}{
		{"missing dir", missing, base, missing},
		{"relative missing dir", "./no/such/run", base, "./no/such/run"},
		{"file not dir", filepath.Join(kev, "head.pt"), base, filepath.Join(kev, "head.pt")},
		{"no head.pt", noHead, base, filepath.Join(noHead, "head.pt")},
		{"bad head.pt", badHead, base, filepath.Join(badHead, "head.pt")},
		{"missing base", kev, missing, missing},
		{"base without tokenizer", kev, noTok, filepath.Join(noTok, "tokenizer.json")},
		{"bad shard", kev, badShard, shards[0]},
		{"bad adapter config", badAdapter, base, filepath.Join(badAdapter, "adapter_config.json")},
		{"hub name not cached", "someorg/some-kev@main", base, "someorg/some-kev@main"},
		{"hub base not cached", kev, "someorg/some-base", "someorg/some-base"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load(ctx, c.kev, Options{Base: c.base, Offline: true})
			if err == nil {
				p.Close()
				t.Fatal("no error")
			}
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("%T %v, want *LoadError", err, err)
			}
			if le.File != c.file || !strings.Contains(err.Error(), c.file) {
				t.Errorf("error %q names %q, want %q", err, le.File, c.file)
			}
		})
	}
	// A directory that is not a checkpoint (empty, a base model, a checkpoint given as the base) is named with
	// what it holds and what a checkpoint directory holds.
	empty := filepath.Join(tmp, "empty")
	os.Mkdir(empty, 0o755)
	for _, c := range []struct {
		name, kev, base, file string
		want                  []string
	}{
		{"empty dir", empty, base, filepath.Join(empty, "head.pt"), []string{"the directory is empty", "holds head.pt (the pointer head) and either a LoRA adapter"}},
		{"base as checkpoint", base, base, filepath.Join(base, "head.pt"), []string{"holds a base model", "give it as the base", "adapter_config.json and adapter_model.safetensors"}},
		{"no head.pt beside the adapter", noHead, base, filepath.Join(noHead, "head.pt"), []string{"LoRA adapter (adapter_config.json) but not the head.pt"}},
		{"checkpoint as base", kev, kev, filepath.Join(kev, "config.json"), []string{"is not a base model", "holds a Kev checkpoint (head.pt)", "config.json, model*.safetensors"}},
	} {
		_, err := Load(ctx, c.kev, Options{Base: c.base, Offline: true})
		var le *LoadError
		var lay *checkpoint.LayoutError
		if !errors.As(err, &le) || le.File != c.file || !errors.As(err, &lay) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want a *LoadError for %s with a *checkpoint.LayoutError", c.name, err, c.file)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	if _, err := Load(ctx, "someorg/some-kev", Options{Offline: true}); !errors.Is(err, hub.ErrNotCached) {
		t.Errorf("uncached hub name offline: %v, want hub.ErrNotCached", err)
	}
	var ce *checkpoint.ConfigError
	if _, err := Load(ctx, badAdapter, Options{Base: base}); !errors.As(err, &ce) {
		t.Errorf("bad adapter config: %v does not unwrap to *checkpoint.ConfigError", err)
	}
	for _, c := range []struct {
		opts  Options
		field string
	}{
		{Options{Base: base, DType: "fp8"}, "DType"},
		{Options{Base: base, DType: "fp16", Device: CUDA}, fp16Field()},
		{Options{Base: base, Device: "abacus"}, "Device"},
		{Options{Base: base, Temperature: -1}, "Temperature"},
	} {
		var oe *OptionError
		if _, err := Load(ctx, kev, c.opts); !errors.As(err, &oe) || oe.Field != c.field {
			t.Errorf("options %+v: %v, want an OptionError for %s", c.opts, err, c.field)
		}
	}
}

// BenchmarkPredictorAsk runs the six golden requests of tiny-a one after another, with no prefix cache and with
// every state cached; tokens/s counts input_tokens (the state once plus every question's branch).
func BenchmarkPredictorAsk(b *testing.B) {
	s := goldenSets(b)[0]
	reqs := goldenRequests(b, s)
	for _, bc := range []struct {
		name  string
		cache int
	}{{"uncached", -1}, {"cached", 8}} {
		b.Run(bc.name, func(b *testing.B) {
			p := loadGolden(b, s, Options{PrefixCache: bc.cache})
			tokens := 0
			for b.Loop() {
				for _, r := range reqs {
					resp, err := p.Do(context.Background(), fromSysRequest(r))
					if err != nil {
						b.Fatal(err)
					}
					tokens += resp.Usage.InputTokens
				}
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(b.N*len(reqs))/b.Elapsed().Seconds(), "requests/s")
		})
	}
}
