package kev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/hub"
	"github.com/kevgo/kev/internal/loadprogress"
	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/safetensors"
	"github.com/kevgo/kev/tensor"
	_ "github.com/kevgo/kev/tensor/cpu" // the reference backend, always available
	"github.com/kevgo/kev/tokenizer"
)

// Options configure Load. The zero value serves a checkpoint the way Kev's server does by default on a CPU: fp32,
// head.pt's temperature, a four-state prefix cache, strict 65,536-token states, batches of up to 64 requests.
type Options struct {
	Base            string  // base model dir or hub name[@rev]; "" = head.pt's base at base_revision
	Device          Device  // CPU (default), CUDA ("cuda:0" also); CUDA needs the tensor/cuda import and -tags cuda
	DType           DType   // Float32 (CPU default), BFloat16 (default elsewhere) or Float16 (CPU only); "fp32", "bf16", "fp16" also read
	Temperature     float64 // > 0 overrides head.pt's temperature (KEV_TEMPERATURE)
	LoRAScale       float64 // 0 means 1 (KEV_LORA_SCALE)
	PrefixCache     int     // states kept; 0 → 4; negative disables (KEV_PREFIX_CACHE=0 → pass -1)
	PrefixMinTokens int     // 0 → the model's: 0 on a hybrid (Qwen3.5) base, 384 on an attention-only one
	PrefixMaxTokens int     // 0 → 65536
	TruncateStates  bool    // KEV_TRUNCATE_STATES
	DateFacts       bool    // KEV_DATE_FACTS
	MaxBatch        int     // 0 → 64
	Rotations       int     // > 1: average each choice and score question over that many option orders (see Rotate)
	Offline         bool    // never touch the network (HF_HUB_OFFLINE also honoured)
	Logger          *slog.Logger

	// Progress receives a one-line progress display while the weights load (bytes, rate, time left); nil means
	// standard error when it is a terminal. Without a terminal, progress goes to Logger as "kev: loading" events.
	// io.Discard shows none.
	Progress io.Writer
}

// Defaults of Options.
const (
	defaultPrefixCache = 4  // states the prefix cache keeps
	defaultMaxBatch    = 64 // requests one batch takes
	// attentionOnlyPrefixMinTokens is the shortest state cached on an attention-only (Qwen3, Qwen2.5) base, Kev's
	// prefix_min_tokens there; hybrid bases cache every state.
	attentionOnlyPrefixMinTokens = 384
)

// testBeforeTake, set by tests only, becomes the beforeTake hook of the predictors loaded after.
var testBeforeTake func()

// LoadError reports a checkpoint or base model that could not be loaded. File names the file or directory at
// fault (a path, or a hub name when the hub could not serve it); Err says what went wrong and unwraps to the
// loader's own typed error.
type LoadError struct {
	File string
	Err  error
}

// Error names the file and the cause.
func (e *LoadError) Error() string {
	msg := e.Err.Error()
	switch {
	case e.File == "":
		return "kev: load: " + msg
	case strings.Contains(msg, e.File):
		return "kev: load: " + msg
	}
	return "kev: load " + e.File + ": " + msg
}

// Unwrap returns the cause.
func (e *LoadError) Unwrap() error { return e.Err }

// OptionError reports an Options field with a value Load cannot use.
type OptionError struct {
	Field  string // "DType", "Device", ...
	Value  string
	Reason string
}

// Error names the field, its value and why it was refused.
func (e *OptionError) Error() string {
	return fmt.Sprintf("kev: Options.%s %q: %s", e.Field, e.Value, e.Reason)
}

// Info describes a loaded predictor, as Kev's model card does.
type Info struct {
	Run            string  // the checkpoint as given to Load (a path or hub name, not the resolved directory)
	Base           string  // head.pt's base model id, e.g. "Qwen/Qwen3.5-4B-Base"
	BaseRevision   string  // head.pt's base_revision ("" when none)
	LoRA           int     // adapter rank; 0 for full-weight checkpoints
	Device         Device  // the device as given in Options ("cpu" when none was)
	Backend        string  // "go"
	DType          DType   // the parameters' type: Float32, BFloat16 or Float16
	Temperature    float64 // the head temperature in use
	MaxStateTokens int     // the state limit, the <state> token included
	TruncateStates bool    // long states are cut instead of refused
	ReleaseDate    string  // YYYY-MM-DD: the hub's last-modified date of the revision when known, else head.pt's mtime
	WeightBytes    int64   // bytes of model and head weights held by the backend
}

// Stats are a predictor's counters, as Kev's model card reports them.
type Stats struct {
	PrefixCache PrefixCacheStats
	Batches     BatchStats
	Graphs      *GraphStats // nil when the backend captures no graphs (CPU)
}

// PrefixCacheStats are the prefix cache's bounds, contents and counters.
type PrefixCacheStats struct {
	Size           int // states kept at most (0: disabled)
	MinStateTokens int // shorter states are not cached
	MaxTokens      int // bound on the cached states' tokens in all
	Hits, Misses   int // requests with a cacheable state whose prefix was / was not cached
	CachedStates   int // states cached now
	OOMRetries     int // batches that ran out of memory with states cached and ran again without them
}

// BatchStats count the batches the model has run.
type BatchStats struct {
	Count    int // batches run
	Requests int // requests run in them
	Queued   int // requests waiting now
}

// GraphStats count captured device graphs.
type GraphStats struct {
	Captured, Kept, Pending, Failed int
}

// Predictor answers questions about texts with a loaded Kev checkpoint. It is safe for concurrent use: requests
// are tokenised on the caller's goroutine and queued, and one goroutine owns the model, running what waits in
// batches.
type Predictor struct {
	info    Info
	opts    Options
	log     *slog.Logger
	tok     *tokenizer.Tokenizer
	backend tensor.Backend
	model   *layers.Model
	pointer *layers.Pointer
	cache   *prefixcache.Cache[*layers.State]

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*call
	closed   bool
	done     chan struct{} // closed when the model goroutine has exited
	batches  int
	requests int

	held       map[*layers.State]bool // states the cache holds (model goroutine only)
	passTokens int                    // token budget of one model pass (RowPassTokens)

	onBatch atomic.Pointer[func(int)] // receives every batch's size (the HTTP server's metrics)

	files io.Closer // the mapped weights files the backend reads (CPU), closed by Close

	accepted   int    // requests queued since Load
	beforeTake func() // test hook: runs on the model goroutine before it takes a batch
}

// Load loads a Kev checkpoint, a local directory or a hub name "org/name[@revision]", and starts its model
// goroutine. The base model is Options.Base, or head.pt's base at its base_revision; the tokenizer is the base's.
// Files that cannot be read are reported as a *LoadError naming the file.
func Load(ctx context.Context, checkpointName string, opts Options) (*Predictor, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Device == "" {
		opts.Device = CPU
	}
	dt, dtName, err := parseDType(opts.DType, opts.Device)
	if err != nil {
		return nil, err
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	switch {
	case opts.PrefixCache == 0:
		opts.PrefixCache = defaultPrefixCache
	case opts.PrefixCache < 0:
		opts.PrefixCache = 0
	}
	if opts.PrefixMaxTokens <= 0 {
		opts.PrefixMaxTokens = prefixcache.DefaultMaxTokens
	}
	if opts.Temperature < 0 {
		return nil, &OptionError{Field: "Temperature", Value: fmt.Sprint(opts.Temperature), Reason: "must be > 0 (or 0 for head.pt's)"}
	}
	backend, err := openDevice(opts.Device)
	if err != nil {
		return nil, err
	}

	runDir, runSnap, err := resolveModel(ctx, checkpointName, false, opts.Offline)
	if err != nil {
		return nil, err
	}
	headPath := filepath.Join(runDir, checkpoint.HeadFile)
	head, err := checkpoint.ReadHead(headPath)
	if err != nil {
		return nil, loadError(headPath, err)
	}
	baseDir, err := resolveBase(ctx, runDir, head, opts)
	if err != nil {
		return nil, err
	}
	tokPath := filepath.Join(baseDir, "tokenizer.json")
	tok, err := tokenizer.LoadDir(baseDir)
	if err != nil {
		return nil, loadError(tokPath, err)
	}
	if _, err := systemone.LookupDelimiters(tok); err != nil {
		return nil, &LoadError{File: tokPath, Err: err}
	}
	copts := checkpoint.Options{DType: dt}
	if opts.LoRAScale != 0 {
		s := opts.LoRAScale
		copts.LoRAScale = &s
	}
	start := time.Now()
	pw := opts.Progress
	if pw == nil {
		pw = loadprogress.Terminal()
	} else if pw == io.Discard {
		pw = nil
	}
	var prog *loadprogress.Reporter
	if pw != nil || opts.Progress == nil {
		prog = loadprogress.New("kev: loading", pw, log)
	}
	ck, err := checkpoint.OpenStream(runDir, baseDir, checkpoint.StreamOptions{Options: copts, Progress: prog.Update})
	if err != nil {
		return nil, loadError(runDir, err)
	}
	weightBytes, total := ck.Bytes(), ck.Bytes()
	model, err := layers.New(backend, ck.Weights)
	if err != nil {
		ck.Close()
		return nil, loadError(runDir, err)
	}
	prog.Done(total, total)
	temp := head.Temperature
	if opts.Temperature > 0 {
		temp = opts.Temperature
	}
	h := ck.Head
	pointer, err := layers.NewPointer(backend, h.QWeight, h.QBias, h.KWeight, h.KBias, temp)
	if err != nil {
		ck.Close()
		return nil, &LoadError{File: headPath, Err: err}
	}
	for _, t := range []*qwen35.Tensor{h.QWeight, h.QBias, h.KWeight, h.KBias} {
		weightBytes += int64(qwen35Numel(t)) * 4
	}
	if opts.PrefixMinTokens == 0 && !ck.Weights.Config.Hybrid() {
		opts.PrefixMinTokens = attentionOnlyPrefixMinTokens
	}
	// The CPU backend keeps unmerged bf16 weights in the mapped files: those stay open until Close. Other backends
	// hold their own copies, so the files close now and the host memory of the load goes back to the system.
	var files io.Closer
	if backend.Name() == "cpu" {
		files = ck
	} else if err := ck.Close(); err != nil {
		return nil, loadError(runDir, err)
	}
	ck.Weights = nil
	debug.FreeOSMemory()
	secs := time.Since(start).Seconds()

	p := &Predictor{
		info: Info{
			Run: checkpointName, Base: head.Base, BaseRevision: head.BaseRevision, LoRA: head.LoRA,
			Device: opts.Device, Backend: "go", DType: dtName, Temperature: temp,
			MaxStateTokens: systemone.MaxStateTokens, TruncateStates: opts.TruncateStates,
			ReleaseDate: releaseDate(runSnap, headPath), WeightBytes: weightBytes,
		},
		opts: opts, log: log, tok: tok, backend: backend, model: model, pointer: pointer,
		cache: prefixcache.New[*layers.State](opts.PrefixCache, opts.PrefixMinTokens, opts.PrefixMaxTokens),
		done:  make(chan struct{}),
		held:  map[*layers.State]bool{},

		passTokens: systemone.RowPassTokens,
		files:      files,
	}
	p.cond = sync.NewCond(&p.mu)
	p.beforeTake = testBeforeTake
	log.Info("kev: loaded", "run", checkpointName, "dir", runDir, "base", baseDir, "device", opts.Device,
		"dtype", dtName, "temperature", temp, "weight_bytes", weightBytes, "seconds", round3(secs),
		"gb_per_s", round3(float64(total)/1e9/max(secs, 1e-9)))
	go p.loop()
	return p, nil
}

// resolveModel finds the directory of a model: a local directory as is (it must hold the required files),
// or a hub name through the hub cache.
func resolveModel(ctx context.Context, name string, base bool, offline bool) (string, *hub.Snapshot, error) {
	required := []string{checkpoint.HeadFile}
	if base {
		required = []string{checkpoint.ConfigFile, "tokenizer.json"}
	}
	if name == "" {
		return "", nil, &LoadError{Err: errors.New("no checkpoint named")}
	}
	if fi, err := os.Stat(name); err == nil {
		if !fi.IsDir() {
			return "", nil, &LoadError{File: name, Err: errors.New("not a directory")}
		}
		for _, f := range required {
			if _, err := os.Stat(filepath.Join(name, f)); err != nil {
				if lerr := checkpoint.CheckLayout(name, base); lerr != nil {
					err = lerr // says what the directory holds and what it should
				}
				return "", nil, &LoadError{File: filepath.Join(name, f), Err: err}
			}
		}
		return name, &hub.Snapshot{Dir: name, Local: true}, nil
	} else if looksLikePath(name) {
		return "", nil, &LoadError{File: name, Err: fs.ErrNotExist}
	}
	if _, err := hub.ParseName(name); err != nil {
		return "", nil, &LoadError{File: name, Err: fmt.Errorf("neither a directory nor a hub name: %w", err)}
	}
	snap, err := hub.Fetch(ctx, name, hub.Options{Offline: offline, Required: required})
	if err != nil {
		return "", nil, &LoadError{File: name, Err: err}
	}
	for _, f := range required {
		if _, err := os.Stat(filepath.Join(snap.Dir, f)); err != nil {
			if lerr := checkpoint.CheckLayout(snap.Dir, base); lerr != nil {
				err = lerr
			}
			return "", nil, &LoadError{File: name + ": " + f, Err: err}
		}
	}
	return snap.Dir, snap, nil
}

// looksLikePath reports whether a name that does not exist can only have been meant as a path: a hub name is
// "org/name" with an optional "@revision".
func looksLikePath(name string) bool {
	repo, _, _ := strings.Cut(name, "@")
	return filepath.IsAbs(name) || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "~") ||
		strings.Count(repo, "/") != 1 || strings.ContainsRune(repo, '\\')
}

// resolveBase finds the base model's directory: Options.Base, else a full-weight checkpoint's own directory when it
// carries the tokenizer, else head.pt's base at its base_revision.
func resolveBase(ctx context.Context, runDir string, head *checkpoint.Head, opts Options) (string, error) {
	if opts.Base != "" {
		dir, _, err := resolveModel(ctx, opts.Base, true, opts.Offline)
		return dir, err
	}
	if head.Weights == "full" {
		if _, err := os.Stat(filepath.Join(runDir, "tokenizer.json")); err == nil {
			return runDir, nil
		}
	}
	if head.Base == "" {
		return "", &LoadError{File: filepath.Join(runDir, checkpoint.HeadFile), Err: errors.New("names no base model; set Options.Base")}
	}
	name := head.Base
	if head.BaseRevision != "" {
		name += "@" + head.BaseRevision
	}
	dir, _, err := resolveModel(ctx, name, true, opts.Offline)
	return dir, err
}

// loadError wraps a loader error, naming the file the loader names when it does.
func loadError(fallback string, err error) error {
	var ce *checkpoint.ConfigError
	var te *checkpoint.TensorError
	var pe *fs.PathError
	var tf *tokenizer.FormatError
	var sf *safetensors.FormatError
	var sm *safetensors.MissingError
	file := fallback
	switch {
	case errors.As(err, &sf) && sf.File != "":
		file = sf.File
	case errors.As(err, &sm) && sm.File != "":
		file = sm.File
	case errors.As(err, &ce) && ce.File != "":
		file = ce.File
	case errors.As(err, &te) && te.File != "":
		file = te.File
	case errors.As(err, &tf) && tf.File != "":
		file = tf.File
	case errors.As(err, &pe):
		file = pe.Path
	}
	return &LoadError{File: file, Err: err}
}

func qwen35Numel(t *qwen35.Tensor) int { return tensor.Numel(t.Shape) }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// releaseDate is the hub's last-modified date of the revision when the hub was asked, else head.pt's mtime as a
// local date.
func releaseDate(snap *hub.Snapshot, headPath string) string {
	if snap != nil && !snap.LastModified.IsZero() {
		return snap.LastModified.UTC().Format(time.DateOnly)
	}
	if fi, err := os.Stat(headPath); err == nil {
		return fi.ModTime().Local().Format(time.DateOnly)
	}
	return ""
}

// Info describes the loaded checkpoint.
func (p *Predictor) Info() Info { return p.info }

// Stats returns the prefix cache's and the batcher's counters.
func (p *Predictor) Stats() Stats {
	cs := p.cache.Stats()
	p.mu.Lock()
	b := BatchStats{Count: p.batches, Requests: p.requests, Queued: len(p.queue)}
	p.mu.Unlock()
	return Stats{
		PrefixCache: PrefixCacheStats{Size: cs.Size, MinStateTokens: cs.MinTokens, MaxTokens: cs.MaxTokens,
			Hits: cs.Hits, Misses: cs.Misses, CachedStates: cs.Entries, OOMRetries: cs.OOMRetries},
		Batches: b,
	}
}

// Ask answers questions about a state, as a System One request with the default model name would. The state is
// text (a string) or structured content: anything ValueOf takes, such as a map[string]any, an Object, a slice or
// a Value.
func (p *Predictor) Ask(ctx context.Context, state any, questions ...QuestionEntry) ([]AnswerEntry, error) {
	req := &Request{Questions: questions}
	if s, ok := state.(string); ok {
		req.State = Text(s)
	} else {
		v, err := ValueOf(state)
		if err != nil {
			return nil, err
		}
		req.State = v
	}
	resp, err := p.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Answers, nil
}

// Do answers a System One request. The request is validated, rendered and encoded on the caller's goroutine:
// a *ValidationError, *StateTooLongError or *RowTooLongError comes back before the request is queued. Otherwise it
// waits for the model goroutine, which runs it in a batch with whatever else is waiting; the response's LatencyMS
// is that batch's model time. If ctx ends while the request waits, Do returns ctx.Err() and the request is
// skipped. After Close, Do returns ErrClosed.
func (p *Predictor) Do(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, errors.New("kev: Do: nil request")
	}
	resp, err := p.do(ctx, toSysRequest(req))
	if err != nil {
		return nil, publicError(err)
	}
	return fromSysResponse(resp), nil
}

// do answers a protocol-level request: Do without the conversions, for the HTTP server.
func (p *Predictor) do(ctx context.Context, req *systemone.Request) (*systemone.Response, error) {
	rec, enc, r, err := p.submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return p.respond(req, rec, enc, r)
}

// submit admits a request and waits for the model's result.
func (p *Predictor) submit(ctx context.Context, req *systemone.Request) (*systemone.Record, *systemone.Encoding, result, error) {
	if p.opts.Rotations > 1 && req != nil {
		return p.submitRotated(ctx, req)
	}
	return p.submitOnce(ctx, req)
}

// submitOnce admits one request as it is and waits for the model's result.
func (p *Predictor) submitOnce(ctx context.Context, req *systemone.Request) (*systemone.Record, *systemone.Encoding, result, error) {
	if req == nil {
		return nil, nil, result{}, errors.New("kev: Do: nil request")
	}
	if p.isClosed() {
		return nil, nil, result{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, result{}, err
	}
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{DateFacts: p.opts.DateFacts})
	if err != nil {
		return nil, nil, result{}, err
	}
	enc, err := systemone.Encode(p.tok, rec, systemone.EncodeOptions{Truncate: p.opts.TruncateStates})
	if err != nil {
		return nil, nil, result{}, err
	}
	c := &call{ctx: ctx, enc: enc, done: make(chan result, 1)}
	if err := p.enqueue(c); err != nil {
		return nil, nil, result{}, err
	}
	select {
	case r := <-c.done:
		return rec, enc, r, r.err
	case <-ctx.Done():
		c.cancelled.Store(true)
		return nil, nil, result{}, ctx.Err()
	}
}

// respond turns the model's result into the System One response.
func (p *Predictor) respond(req *systemone.Request, rec *systemone.Record, enc *systemone.Encoding, r result) (*systemone.Response, error) {
	answers, err := systemone.ToAnswers(rec, r.probs)
	if err != nil {
		return nil, err
	}
	resp := &systemone.Response{
		Model:     req.ModelName(),
		Answers:   answers,
		Usage:     systemone.Usage{InputTokens: enc.InputTokens(), OutputTokens: systemone.OutputTokens(p.tok, answers)},
		LatencyMS: pyjson.Round(float64(r.latency.Nanoseconds())/1e6, 1),
	}
	if p.opts.TruncateStates {
		t := enc.Truncated
		resp.Truncated = &t
		resp.Usage.StateTokens, resp.Usage.StateTokensUsed = enc.StateTokens, enc.StateLen
	}
	return resp, nil
}

// Close stops taking requests, lets the model goroutine finish every request already queued, then frees the
// model's cached states. Later calls return ErrClosed; closing again does nothing.
func (p *Predictor) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	<-p.done
	if already {
		return nil
	}
	for s := range p.held {
		s.Free()
	}
	p.held = nil
	p.cache.Clear()
	p.model, p.pointer = nil, nil
	if p.files != nil {
		p.files.Close()
		p.files = nil
	}
	p.log.Info("kev: closed")
	return nil
}

func (p *Predictor) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
