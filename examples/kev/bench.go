package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/procstat"
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

func init() {
	commands["bench"] = benchCommand
	summaries["bench"] = "time Kev's serving cases (new and cached state) and concurrent clients; JSON report"
}

// defaultSweepCase is the case the concurrency sweep sends, when the cases file has it.
const defaultSweepCase = "6 questions, short state"

// sweepTicketBase numbers the sweep's tickets past any the latency runs use, so that every sweep request is a new
// state.
const sweepTicketBase = 1_000_000

// The report kev bench writes (-out FILE, else standard output), a superset of what Kev's serving_bench reports
// for one configuration. Times are milliseconds, memory bytes unless the key says otherwise; objects keyed by case
// name keep the cases file's order.
//
//	{"command": "kev bench", "run": checkpoint, "base": base, "device": "cpu"|"cuda", "dtype": "float32"|"bfloat16"|"float16"|"fp8",
//	 "backend": "go", "go": version, "gomaxprocs": n,
//	 "host_cpu": {"model": /proc/cpuinfo's model name, "logical_cpus": n, "gomaxprocs": n, "features": ["avx2", ...],
//	              "kernel": the CPU backend's matrix kernels, "fp32 avx512, bf16 amx"},
//	 "temperature": t, "load_seconds": s,
//	 "memory": {"kind": "device"|"go_heap", "resident_bytes": n, "resident_gb": x, "free_bytes": n,
//	            "weight_bytes": n, "process_rss_bytes": n},      after load (device: the backend's pool; cpu: heap in use)
//	 "runs": n, "warmup": n, "cases_file": path, "cases_selected": [name, ...] (the -case flags; null: all),
//	 "latency": {case: {"tokens": input tokens, "state_tokens": n, "questions": n, "first_ms": model ms of the first
//	             request (i = 0), "first_hit": whether it hit the cache, "new_ms": median, "cached_ms": median,
//	             "new":    {"runs": n, "hits": n, "model_ms": dist, "wall_ms": dist, "tokenize_ms": dist},
//	             "cached": {...}}},
//	 "probabilities": {case: {"state_text": the i = 0 state, "probabilities": [[p, ...], ...] per question in order,
//	                   unrounded (each float32 printed as the float64 it widens to), "answers": Kev's answers object,
//	                   "new_state_example": {"state_text": "Ticket 1. " + state, "state_tokens", "probabilities"}}},
//	 "concurrency": [{"clients", "duration_s", "requests", "errors", "first_error", "rps", "p50_ms", "p99_ms",
//	                  "model_p50_ms", "model_p99_ms", "batches", "mean_batch", "prefix_hits", "prefix_misses"}],
//	 "graphs": null | {"captured", "kept", "pending", "failed", "replays", "eager"} (replays and eager: the parts of passes
//	           launched as graphs and issued eagerly, load and warm-up included),
//	 "prefix_cache": {"size", "min_state_tokens", "max_tokens", "hits", "misses", "cached_states", "oom_retries"},
//	 "batches": {"count", "requests", "queued"},
//	 "memory_after": {...}, "notes": [...], "interrupted": bool, "seconds": s}
//
// where dist is {"median", "p10", "p90", "min", "max", "mean", "runs", "all": [...]} (percentiles interpolated
// linearly between closest ranks, as Python's statistics.quantiles(method="inclusive")). model_ms is
// Response.LatencyMS, the model time of the batch (0.1 ms steps); wall_ms is the time Do took; tokenize_ms is the
// time rendering and encoding the same request took, measured apart. "new" requests have the state
// "Ticket <i>. " + the case's state (i = 1, 2, ...), so every one misses the prefix cache; "cached" ones repeat the
// case's own state (i = 0) and hit it. The first warmup runs of each kind are not counted. A case cut short (SIGTERM,
// interrupt) keeps the timed runs it finished ("runs" says how many; a kind with none has no entry), and the report
// says "interrupted": true.

// benchConfig holds kev bench's measurement flags.
type benchConfig struct {
	runs, warmup int
	clients      []int
	duration     time.Duration
	budget       time.Duration // 0: none
	sweepCase    string
}

func benchCommand(args []string) error {
	start := time.Now()
	fs := newFlags("bench", "[-checkpoint DIR|NAME] [-base DIR|NAME] [-device cpu|cuda] [-dtype fp32|bf16] [-cases FILE] "+
		"[-case NAME|N]... [-runs 20] [-warmup 3] [-clients 1,32,64] [-duration 10s] [-budget 0] [-out FILE] [-cpuprofile FILE] [-trace FILE] "+
		"[-log-format text|json] [-log-level info]")
	var mf modelFlags
	mf.register(fs)
	var cfg benchConfig
	var lc logConfig
	lc.register(fs, os.Getenv)
	casesPath := fs.String("cases", "", "the cases file, {\"cases\": {name: request}} (default: Kev's serving benchmark shapes, built in)")
	var only caseSelection
	fs.Var(&only, "case", "run only this case of the cases file: its name or its 1-based index (repeatable; default: all)")
	fs.IntVar(&cfg.runs, "runs", 20, "timed requests of each kind per case")
	fs.IntVar(&cfg.warmup, "warmup", 3, "requests of each kind per case run first and not counted")
	clients := fs.String("clients", "1,32,64", "concurrency levels: clients calling Do at once, comma-separated (\"\" or 0: no sweep)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "time each concurrency level runs")
	fs.DurationVar(&cfg.budget, "budget", 0, "wall-clock budget of the whole command, load included; runs and levels shrink to fit it (0: none)")
	fs.StringVar(&cfg.sweepCase, "sweep-case", defaultSweepCase, "the case the concurrent clients send (the first case when the file lacks it)")
	out := fs.String("out", "", "write the JSON report to this file (default: standard output, before the table)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the timed requests (not the load) to this file, for go tool pprof")
	traceFile := fs.String("trace", "", "write a Go execution trace of the timed requests (not the load) to this file, for go tool trace")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.clients, err = parseClients(*clients); err != nil {
		return usagef("-clients: %v", err)
	}
	if err := lc.check(); err != nil {
		return err
	}
	switch {
	case cfg.runs < 1:
		return usagef("-runs %d: want at least 1", cfg.runs)
	case cfg.warmup < 0:
		return usagef("-warmup %d: want 0 or more", cfg.warmup)
	case cfg.duration <= 0 && len(cfg.clients) > 0:
		return usagef("-duration %v: want a positive duration", cfg.duration)
	case cfg.budget < 0:
		return usagef("-budget %v: want 0 (none) or a positive duration", cfg.budget)
	}
	path := *casesPath
	cases, err := readCasesOrBundled(path)
	if err != nil {
		return err
	}
	if path == "" {
		path = bundledCasesRef
	}
	if cases, err = only.pick(path, cases); err != nil {
		return err
	}
	run, opts := mf.options()
	if opts.Logger == nil { // the load's progress events and its summary line (size, seconds, GB/s); at debug, every batch
		opts.Logger = lc.logger(stderr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	loadStart := time.Now()
	sampler := procstat.Sample(10 * time.Millisecond)
	m, err := loadModel(ctx, run, opts)
	peakAnon, _ := sampler.Stop()
	if err != nil {
		return err
	}
	defer m.Close()
	if m.bundled {
		fmt.Fprintln(stderr, noCheckpointNote)
		run = m.name
		if opts.Base == "" {
			opts.Base = "built-in test base " + bundledBase
		}
	}
	p := m.Predictor
	info := p.Info()
	b := &bench{p: p, m: bridge.Predictor(p), cfg: cfg, start: start, ctx: ctx}
	rep := &b.report
	rep.set("command", "kev bench")
	rep.set("run", run)
	rep.set("base", opts.Base)
	rep.set("device", info.Device)
	rep.set("dtype", info.DType)
	rep.set("backend", info.Backend)
	rep.set("hardware", info.Hardware)
	rep.set("go", runtime.Version())
	rep.set("gomaxprocs", runtime.GOMAXPROCS(0))
	hc := readHostCPU()
	rep.set("host_cpu", hc)
	rep.set("temperature", info.Temperature)
	rep.set("load_seconds", round(time.Since(loadStart).Seconds(), 2))
	mem := memoryReport(p)
	rep.set("memory", mem)
	host := hostMemory(peakAnon)
	rep.set("host_memory", host)
	fmt.Fprintf(stderr, "kev bench: loaded %s (%s on %s: %s) in %.1f s; %s; host %s\n", run, info.DType, info.Device,
		info.Hardware, time.Since(loadStart).Seconds(), mem.describe(), host.describe())
	fmt.Fprintf(stderr, "kev bench: host %q, %d logical CPUs, GOMAXPROCS %d, features %s\n", hc.Model, hc.LogicalCPUs,
		hc.GOMAXPROCS, strings.Join(hc.Features, " "))
	rep.set("runs", cfg.runs)
	rep.set("warmup", cfg.warmup)
	rep.set("cases_file", path)
	var selected []string
	if len(only) > 0 {
		for _, c := range cases {
			selected = append(selected, c.name)
		}
	}
	rep.set("cases_selected", selected)

	stopProfiles, err := startProfiles(*cpuProfile, *traceFile)
	if err != nil {
		return err
	}
	b.run(cases)
	if err := stopProfiles(); err != nil {
		return err
	}

	st := p.Stats()
	if st.Graphs != nil {
		rep.set("graphs", map[string]int{"captured": st.Graphs.Captured, "kept": st.Graphs.Kept,
			"pending": st.Graphs.Pending, "failed": st.Graphs.Failed, "replays": st.Graphs.Replays, "eager": st.Graphs.Eager})
	} else {
		rep.set("graphs", nil)
	}
	pc := st.PrefixCache
	rep.set("prefix_cache", map[string]int{"size": pc.Size, "min_state_tokens": pc.MinStateTokens,
		"max_tokens": pc.MaxTokens, "hits": pc.Hits, "misses": pc.Misses, "cached_states": pc.CachedStates,
		"oom_retries": pc.OOMRetries})
	rep.set("batches", map[string]int{"count": st.Batches.Count, "requests": st.Batches.Requests, "queued": st.Batches.Queued})
	rep.set("memory_after", memoryReport(p))
	if b.notes == nil {
		b.notes = []string{}
	}
	rep.set("notes", b.notes)
	rep.set("interrupted", b.interrupted)
	rep.set("seconds", round(time.Since(start).Seconds(), 1))

	data, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if *out != "" {
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kev bench: report written to %s\n", *out)
	} else if _, err := stdout.Write(data); err != nil {
		return err
	}
	b.printTable(stdout)
	if b.interrupted {
		return errors.New("interrupted: the report holds what was measured before")
	}
	return nil
}

// parseClients reads a comma-separated list of client counts; "" and "0" mean none.
func parseClients(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number of clients", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchCase is one request shape of the cases file.
type benchCase struct {
	name  string
	state string // the state text; new-state requests prefix it
	req   *systemone.Request
}

// request returns the case's request number i: its own state for i = 0, else "Ticket <i>. " + state.
func (c benchCase) request(i int) *systemone.Request {
	r := *c.req
	if i > 0 {
		r.State = systemone.Text(fmt.Sprintf("Ticket %d. %s", i, c.state))
	}
	return &r
}

// CasesError reports a cases file kev bench cannot use: the file, the case (empty for the file as a whole) and why.
type CasesError struct {
	File, Case string
	Err        error
}

// Error names the file, the case and the cause.
func (e *CasesError) Error() string {
	if e.Case == "" {
		return "cases file " + e.File + ": " + e.Err.Error()
	}
	return fmt.Sprintf("cases file %s: case %q: %v", e.File, e.Case, e.Err)
}

// Unwrap returns the cause.
func (e *CasesError) Unwrap() error { return e.Err }

// readCasesOrBundled reads a cases file, or the built-in cases for path "".
func readCasesOrBundled(path string) ([]benchCase, error) {
	if path != "" {
		return readCases(path)
	}
	data, err := bundled.ReadFile(bundledDir + "/" + bundledCases)
	if err != nil {
		return nil, &CasesError{File: bundledCasesRef, Err: err}
	}
	return parseCases(bundledCasesRef, data)
}

// readCases reads a cases file.
func readCases(path string) ([]benchCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &CasesError{File: path, Err: err}
	}
	return parseCases(path, data)
}

// parseCases reads {"cases": {name: {"state": text, "questions": {...}}, ...}} in order, with Python's json
// semantics (a repeated name keeps its first position and its last value); every case must be a valid System One
// request whose state is a non-empty string.
func parseCases(file string, data []byte) ([]benchCase, error) {
	v, err := pyjson.Parse(data)
	if err != nil {
		return nil, &CasesError{File: file, Err: err}
	}
	cs, ok := v.Get("cases")
	if !ok || cs.Len() == 0 || len(cs.Members()) == 0 {
		return nil, &CasesError{File: file, Err: errors.New(`want an object {"cases": {name: request, ...}} with at least one case`)}
	}
	var out []benchCase
	for _, m := range cs.Members() {
		req, err := systemone.RequestFromValue(m.Value)
		if err != nil {
			return nil, &CasesError{File: file, Case: m.Key, Err: err}
		}
		state := req.State.AsString()
		if state == "" {
			return nil, &CasesError{File: file, Case: m.Key, Err: errors.New(`"state" must be a non-empty string (new-state requests prefix it)`)}
		}
		out = append(out, benchCase{name: m.Key, state: state, req: req})
	}
	return out, nil
}

// bench runs the measurements of one predictor and collects the report.
type bench struct {
	p     *kev.Predictor
	m     bridge.Model // p at the protocol level
	cfg   benchConfig
	start time.Time
	ctx   context.Context

	report      ordered
	notes       []string
	interrupted bool

	table []caseRow
	sweep []levelResult
}

// caseRow is one line of the printed table.
type caseRow struct {
	name                 string
	tokens, runs         int
	first                float64
	newMS, cachedMS      dist
	newWall, newTokenize dist
}

// note records a remark in the report and on standard error.
func (b *bench) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.notes = append(b.notes, msg)
	fmt.Fprintln(stderr, "kev bench: "+msg)
}

// deadline is when the budget ends (zero time: no budget).
func (b *bench) deadline() time.Time {
	if b.cfg.budget <= 0 {
		return time.Time{}
	}
	return b.start.Add(b.cfg.budget)
}

func (b *bench) stopped() bool {
	if b.ctx.Err() != nil {
		b.interrupted = true
		return true
	}
	return false
}

// run measures every case, then the concurrency levels.
func (b *bench) run(cases []benchCase) {
	latency, probs := ordered{}, ordered{}
	// The sweep's share of the budget, kept back while the cases run.
	sweepTime := time.Duration(len(b.cfg.clients)) * (b.cfg.duration + 2*time.Second)
	for ci, c := range cases {
		if b.stopped() {
			break
		}
		var caseEnd time.Time
		if d := b.deadline(); !d.IsZero() {
			caseEnd = time.Now().Add(time.Until(d.Add(-sweepTime)) / time.Duration(len(cases)-ci))
		}
		lat, pr, err := b.runCase(c, caseEnd)
		if lat != nil {
			latency.set(c.name, lat)
		}
		if pr != nil {
			probs.set(c.name, pr)
		}
		if err != nil {
			if b.stopped() {
				break
			}
			b.note("%s: %v", c.name, err)
		}
	}
	b.report.set("latency", latency)
	b.report.set("probabilities", probs)

	sweep := cases[0]
	for _, c := range cases {
		if c.name == b.cfg.sweepCase {
			sweep = c
			break
		}
	}
	var levels []levelResult
	for li, n := range b.cfg.clients {
		if b.stopped() {
			break
		}
		dur := b.cfg.duration
		if d := b.deadline(); !d.IsZero() {
			share := time.Until(d)/time.Duration(len(b.cfg.clients)-li) - 2*time.Second
			if share < dur {
				if share < 500*time.Millisecond {
					b.note("concurrency %d and above skipped: the time budget is spent", n)
					break
				}
				b.note("concurrency %d runs %v, not %v (time budget)", n, share.Round(time.Millisecond), dur)
				dur = share
			}
		}
		levels = append(levels, b.level(sweep, n, dur))
	}
	if levels == nil {
		levels = []levelResult{}
	}
	b.sweep = levels
	b.report.set("concurrency", levels)
}

// sample is one timed request.
type sample struct {
	model, wall, tokenize float64 // ms
	hit                   bool
}

// measure tokenises req (timed apart), then runs it through Do.
func (b *bench) measure(req *systemone.Request) (sample, *systemone.Response, error) {
	t0 := time.Now()
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
	if err != nil {
		return sample{}, nil, err
	}
	if _, err := systemone.Encode(b.m.Tokenizer(), rec, systemone.EncodeOptions{}); err != nil {
		return sample{}, nil, err
	}
	tok := time.Since(t0)
	hits := b.p.Stats().PrefixCache.Hits
	t1 := time.Now()
	resp, err := b.m.Do(b.ctx, req)
	wall := time.Since(t1)
	if err != nil {
		return sample{}, nil, err
	}
	return sample{model: resp.LatencyMS, wall: ms(wall), tokenize: ms(tok), hit: b.p.Stats().PrefixCache.Hits > hits}, resp, nil
}

// runCase measures one case: its first request, its probabilities, then new and cached states.
func (b *bench) runCase(c benchCase, end time.Time) (lat, probs ordered, err error) {
	req0 := c.request(0)
	rec, err := systemone.ToRecord(req0, systemone.RecordOptions{})
	if err != nil {
		return nil, nil, err
	}
	enc, err := systemone.Encode(b.m.Tokenizer(), rec, systemone.EncodeOptions{})
	if err != nil {
		return nil, nil, err
	}
	first, resp, err := b.measure(req0)
	if err != nil {
		return nil, nil, err
	}
	p, err := b.m.Probabilities(b.ctx, req0)
	if err != nil {
		return nil, nil, err
	}
	answers, err := json.Marshal(systemone.AnswersValue(resp.Answers))
	if err != nil {
		return nil, nil, err
	}
	probs = ordered{}
	probs.set("state_text", c.state)
	wide, finite := widen(p)
	if !finite {
		b.note("%s: probabilities that are not finite numbers are written as null", c.name)
	}
	probs.set("probabilities", wide)
	probs.set("answers", json.RawMessage(answers))

	lat = ordered{}
	lat.set("tokens", resp.Usage.InputTokens)
	lat.set("state_tokens", enc.StateLen)
	lat.set("questions", len(c.req.Questions))
	lat.set("first_ms", first.model)
	lat.set("first_hit", first.hit)

	var news, cached []sample
	for i := 1; i <= b.cfg.warmup; i++ {
		s, _, err := b.measure(c.request(i))
		if err != nil {
			return lat, probs, err
		}
		news = append(news, s)
	}
	for range b.cfg.warmup {
		s, _, err := b.measure(req0)
		if err != nil {
			return lat, probs, err
		}
		cached = append(cached, s)
	}
	runs := b.cfg.runs
	if !end.IsZero() {
		per := time.Duration(float64(time.Millisecond) * (lastWall(news, first) + lastWall(cached, first)))
		if left := time.Until(end); per > 0 && time.Duration(runs)*per > left {
			runs = max(3, int(left/per))
			if runs < b.cfg.runs {
				b.note("%s: %d timed runs of each kind, not %d (time budget; one run ~%.0f ms new, %.0f ms cached)",
					c.name, runs, b.cfg.runs, lastWall(news, first), lastWall(cached, first))
			}
		}
	}
	news, cached = news[:0], cached[:0]
	var timedErr error
	for i := b.cfg.warmup + 1; i <= b.cfg.warmup+runs && timedErr == nil; i++ {
		s, _, err := b.measure(c.request(i))
		if timedErr = err; err == nil {
			news = append(news, s)
		}
	}
	for i := 0; i < runs && timedErr == nil; i++ {
		s, _, err := b.measure(req0)
		if timedErr = err; err == nil {
			cached = append(cached, s)
		}
	}
	// The timed runs, kept when they were cut short too (the report then says interrupted; "runs", how many ran).
	newStats, newModel := kindStats(news)
	cachedStats, cachedModel := kindStats(cached)
	if len(news) > 0 {
		lat.set("new_ms", newModel.Median)
	}
	if len(cached) > 0 {
		lat.set("cached_ms", cachedModel.Median)
	}
	if len(news) > 0 {
		lat.set("new", newStats)
	}
	if len(cached) > 0 {
		lat.set("cached", cachedStats)
	}
	if timedErr != nil {
		return lat, probs, timedErr
	}
	// The first new state's probabilities, asked last so that no timed request finds it cached.
	req1 := c.request(1)
	p1, err := b.m.Probabilities(b.ctx, req1)
	if err != nil {
		return lat, probs, err
	}
	rec1, err := systemone.ToRecord(req1, systemone.RecordOptions{})
	if err != nil {
		return lat, probs, err
	}
	enc1, err := systemone.Encode(b.m.Tokenizer(), rec1, systemone.EncodeOptions{})
	if err != nil {
		return lat, probs, err
	}
	wide1, finite1 := widen(p1)
	if !finite1 {
		b.note("%s: new-state probabilities that are not finite numbers are written as null", c.name)
	}
	example := ordered{}
	example.set("state_text", req1.State.AsString())
	example.set("state_tokens", enc1.StateLen)
	example.set("probabilities", wide1)
	probs.set("new_state_example", example)

	row := caseRow{name: c.name, tokens: resp.Usage.InputTokens, runs: runs, first: first.model}
	row.newMS, row.cachedMS = newModel, cachedModel
	row.newWall = summarize(field(news, func(s sample) float64 { return s.wall }))
	row.newTokenize = summarize(field(news, func(s sample) float64 { return s.tokenize }))
	b.table = append(b.table, row)
	fmt.Fprintf(stderr, "kev bench: %s: %d tokens, new %.1f ms (p10 %.1f, p90 %.1f), cached %.1f ms, %d runs each\n",
		c.name, row.tokens, newModel.Median, newModel.P10, newModel.P90, cachedModel.Median, runs)
	return lat, probs, nil
}

// lastWall is the wall time of the last sample, or of first when there is none.
func lastWall(s []sample, first sample) float64 {
	if len(s) == 0 {
		return first.wall
	}
	return s[len(s)-1].wall
}

// kindStats summarises the timed requests of one kind.
func kindStats(s []sample) (ordered, dist) {
	hits := 0
	for _, x := range s {
		if x.hit {
			hits++
		}
	}
	model := summarize(field(s, func(s sample) float64 { return s.model }))
	o := ordered{}
	o.set("runs", len(s))
	o.set("hits", hits)
	o.set("model_ms", model)
	o.set("wall_ms", summarize(field(s, func(s sample) float64 { return s.wall })))
	o.set("tokenize_ms", summarize(field(s, func(s sample) float64 { return s.tokenize })))
	return o, model
}

func field(s []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

// levelResult is one concurrency level.
type levelResult struct {
	Clients      int     `json:"clients"`
	DurationS    float64 `json:"duration_s"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	RPS          float64 `json:"rps"`
	P50MS        float64 `json:"p50_ms"`
	P99MS        float64 `json:"p99_ms"`
	ModelP50MS   float64 `json:"model_p50_ms"`
	ModelP99MS   float64 `json:"model_p99_ms"`
	Batches      int     `json:"batches"`
	MeanBatch    float64 `json:"mean_batch"`
	PrefixHits   int     `json:"prefix_hits"`
	PrefixMisses int     `json:"prefix_misses"`
}

// sweepTickets numbers the concurrent clients' tickets.
var sweepTickets atomic.Int64

// level runs n clients calling Do in a loop, each request a new ticket of case c, for d.
func (b *bench) level(c benchCase, n int, d time.Duration) levelResult {
	before := b.p.Stats()
	var (
		mu           sync.Mutex
		walls, model []float64
		errs         int
		firstErr     string
		wg           sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && b.ctx.Err() == nil {
				req := c.request(sweepTicketBase + int(sweepTickets.Add(1)))
				t := time.Now()
				resp, err := b.m.Do(b.ctx, req)
				w := ms(time.Since(t))
				mu.Lock()
				if err != nil {
					if b.ctx.Err() == nil {
						errs++
						if firstErr == "" {
							firstErr = err.Error()
						}
					}
				} else {
					walls = append(walls, w)
					model = append(model, resp.LatencyMS)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := b.p.Stats()
	r := levelResult{Clients: n, DurationS: round(elapsed.Seconds(), 3), Requests: len(walls) + errs, Errors: errs,
		FirstError: firstErr, RPS: round(float64(len(walls))/elapsed.Seconds(), 2),
		P50MS: round(percentile(walls, 0.5), 3), P99MS: round(percentile(walls, 0.99), 3),
		ModelP50MS: round(percentile(model, 0.5), 3), ModelP99MS: round(percentile(model, 0.99), 3),
		Batches:    after.Batches.Count - before.Batches.Count,
		PrefixHits: after.PrefixCache.Hits - before.PrefixCache.Hits, PrefixMisses: after.PrefixCache.Misses - before.PrefixCache.Misses}
	if r.Batches > 0 {
		r.MeanBatch = round(float64(after.Batches.Requests-before.Batches.Requests)/float64(r.Batches), 2)
	}
	fmt.Fprintf(stderr, "kev bench: %d clients: %d requests, %d errors, %.1f rps, p50 %.1f ms, p99 %.1f ms, model p50 %.1f ms, mean batch %.1f\n",
		n, r.Requests, r.Errors, r.RPS, r.P50MS, r.P99MS, r.ModelP50MS, r.MeanBatch)
	return r
}

// memReport is the memory in use after load (or at the end).
type memReport struct {
	Kind          string  `json:"kind"` // "device": the backend's device memory; "go_heap": the Go heap in use
	ResidentBytes int64   `json:"resident_bytes"`
	ResidentGB    float64 `json:"resident_gb"` // 1e9 bytes, as Kev reports it
	FreeBytes     int64   `json:"free_bytes"`  // device: part of resident kept for reuse
	WeightBytes   int64   `json:"weight_bytes"`
	ProcessRSS    int64   `json:"process_rss_bytes"`
}

// hostReport is the process's host memory after the load (/proc/self/status), with the peak of its anonymous
// memory during the load.
type hostReport struct {
	RSS          int64 `json:"rss_bytes"`
	RssAnon      int64 `json:"rss_anon_bytes"`
	RssFile      int64 `json:"rss_file_bytes"`
	VmHWM        int64 `json:"vm_hwm_bytes"`
	PeakAnonLoad int64 `json:"load_peak_rss_anon_bytes"`
}

func hostMemory(peakAnon int64) hostReport {
	st, err := procstat.Read()
	if err != nil {
		return hostReport{}
	}
	return hostReport{RSS: st.VmRSS, RssAnon: st.RssAnon, RssFile: st.RssFile, VmHWM: st.VmHWM, PeakAnonLoad: peakAnon}
}

func (h hostReport) describe() string {
	return fmt.Sprintf("RSS %s (anonymous %s, file %s), anonymous peak during load %s, VmHWM %s", mib(h.RSS),
		mib(h.RssAnon), mib(h.RssFile), mib(h.PeakAnonLoad), mib(h.VmHWM))
}

func memoryReport(p *kev.Predictor) memReport {
	m := memReport{WeightBytes: p.Info().WeightBytes, ProcessRSS: residentBytes()}
	if held, free, ok := bridge.Predictor(p).DeviceMemory(); ok {
		m.Kind, m.ResidentBytes, m.FreeBytes = "device", held, free
	} else {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m.Kind, m.ResidentBytes = "go_heap", int64(ms.HeapInuse)
	}
	m.ResidentGB = round(float64(m.ResidentBytes)/1e9, 2)
	return m
}

func (m memReport) describe() string {
	s := fmt.Sprintf("resident %s (%s", mib(m.ResidentBytes), strings.ReplaceAll(m.Kind, "_", " "))
	if m.Kind == "device" {
		s += fmt.Sprintf(" memory, %s of it free for reuse", mib(m.FreeBytes))
	} else {
		s += " in use"
	}
	s += fmt.Sprintf("); weights %s", mib(m.WeightBytes))
	if m.ProcessRSS > 0 {
		s += fmt.Sprintf("; process resident %s", mib(m.ProcessRSS))
	}
	return s
}

// printTable prints the cases and the concurrency levels.
func (b *bench) printTable(w io.Writer) {
	fmt.Fprintf(w, "\n%-32s %6s %9s %9s %15s %9s %15s %8s %7s %5s\n", "case", "tokens", "first ms", "new ms",
		"p10-p90", "cached ms", "p10-p90", "new wall", "tok ms", "runs")
	for _, r := range b.table {
		fmt.Fprintf(w, "%-32s %6d %9.1f %9.1f %15s %9.1f %15s %8.1f %7.2f %5d\n", r.name, r.tokens, r.first,
			r.newMS.Median, fmt.Sprintf("%.1f-%.1f", r.newMS.P10, r.newMS.P90), r.cachedMS.Median,
			fmt.Sprintf("%.1f-%.1f", r.cachedMS.P10, r.cachedMS.P90), r.newWall.Median, r.newTokenize.Median, r.runs)
	}
	if len(b.sweep) > 0 {
		fmt.Fprintf(w, "\n%7s %8s %6s %8s %8s %8s %12s %10s\n", "clients", "requests", "errors", "rps", "p50 ms",
			"p99 ms", "model p50 ms", "mean batch")
		for _, l := range b.sweep {
			fmt.Fprintf(w, "%7d %8d %6d %8.1f %8.1f %8.1f %12.1f %10.1f\n", l.Clients, l.Requests, l.Errors, l.RPS,
				l.P50MS, l.P99MS, l.ModelP50MS, l.MeanBatch)
		}
	}
}

// dist summarises a series of times.
type dist struct {
	Median float64   `json:"median"`
	P10    float64   `json:"p10"`
	P90    float64   `json:"p90"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Mean   float64   `json:"mean"`
	Runs   int       `json:"runs"`
	All    []float64 `json:"all"`
}

func summarize(xs []float64) dist {
	d := dist{Runs: len(xs), All: make([]float64, len(xs))}
	if len(xs) == 0 {
		return d
	}
	var sum float64
	for i, x := range xs {
		d.All[i] = round(x, 3)
		sum += x
	}
	d.Median = round(percentile(xs, 0.5), 3)
	d.P10 = round(percentile(xs, 0.1), 3)
	d.P90 = round(percentile(xs, 0.9), 3)
	d.Min = round(slices.Min(xs), 3)
	d.Max = round(slices.Max(xs), 3)
	d.Mean = round(sum/float64(len(xs)), 3)
	return d
}

// percentile returns the q-quantile (0..1) of xs, interpolating linearly between closest ranks; 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// widen returns the probabilities as float64, each float32 exactly, so that JSON prints the value it holds; a
// value that is not finite becomes nil (JSON null), and finite reports whether all were.
func widen(p [][]float32) (out [][]any, finite bool) {
	finite = true
	out = make([][]any, len(p))
	for i, q := range p {
		out[i] = make([]any, len(q))
		for j, v := range q {
			f := float64(v)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				finite = false
				continue
			}
			out[i][j] = f
		}
	}
	return out, finite
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// ordered is a JSON object that keeps its keys in insertion order.
type ordered []member

type member struct {
	key   string
	value any
}

// set adds key, or replaces its value in place.
func (o *ordered) set(key string, value any) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].value = value
			return
		}
	}
	*o = append(*o, member{key, value})
}

// MarshalJSON writes the members in order.
func (o ordered) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
		buf = append(append(append(buf, k...), ':'), v...)
	}
	return append(buf, '}'), nil
}

// startProfiles starts a CPU profile and an execution trace into the named files (either may be ""); the function
// it returns stops them and closes the files. Where the host's time goes around the device's: the issue of a
// pass's launches, waits on the device, the batcher, the prefix cache.
func startProfiles(cpuPath, tracePath string) (stop func() error, err error) {
	var files []*os.File
	var stops []func()
	stop = func() error {
		for _, s := range stops {
			s()
		}
		var first error
		for _, f := range files {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	open := func(path string) (*os.File, error) {
		f, err := os.Create(path)
		if err == nil {
			files = append(files, f)
		}
		return f, err
	}
	if cpuPath != "" {
		f, err := open(cpuPath)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		stops = append(stops, pprof.StopCPUProfile)
	}
	if tracePath != "" {
		f, err := open(tracePath)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("-trace: %w", err)
		}
		stops = append(stops, trace.Stop)
	}
	return stop, nil
}
