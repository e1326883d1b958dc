package kev

import (
	"cmp"
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
	"slices"
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
	Device          Device  // CPU (default), CUDA, "cuda:N", a list "cuda:0,1" or "cuda:all" (a replica per GPU); see Device
	DType           DType   // Float32 (CPU default), BFloat16 (default elsewhere), Float16 (CPU only) or FP8 (cuda on compute capability 9.0); "fp32", "bf16", "fp16" also read
	Temperature     float64 // > 0 overrides head.pt's temperature (KEV_TEMPERATURE)
	LoRAScale       float64 // 0 means 1 (KEV_LORA_SCALE)
	PrefixCache     int     // states kept, per replica; 0 → 4; negative disables (KEV_PREFIX_CACHE=0 → pass -1)
	PrefixMinTokens int     // 0 → the model's: 0 on a hybrid (Qwen3.5) base, 384 on an attention-only one
	PrefixMaxTokens int     // 0 → 65536
	TruncateStates  bool    // KEV_TRUNCATE_STATES
	DateFacts       bool    // KEV_DATE_FACTS
	MaxBatch        int     // requests one batch takes, per replica; 0 → 64
	PassTokens      int     // tokens one model pass takes, and one batch's budget, per replica; 0 → 16,384, Kev's ROW_PASS_TOKENS (KEV_PASS_TOKENS)
	CUDAGraphs      int     // pass graphs each GPU keeps: 0 → the backend's default (KEV_CUDA_GRAPHS), < 0 → off; > 0 on a backend without graphs is an *OptionError
	MaxQuestions    int     // > 0: refuse requests with more questions (*TooManyQuestionsError); 0: no limit, as Kev
	Rotations       int     // > 1: average each choice and score question over that many option orders (see Rotate)
	Offline         bool    // never touch the network (HF_HUB_OFFLINE also honoured)
	Name            string  // the checkpoint's name in Info.Run (the model card); "" = as given to Load
	Logger          *slog.Logger

	// Progress receives a one-line progress display while the weights load (bytes, rate, time left); nil means
	// standard error when it is a terminal. Without a terminal, progress goes to Logger as "kev: loading" events.
	// io.Discard shows none.
	Progress io.Writer
}

// Defaults of Options.
const (
	defaultPrefixCache = 4                       // states the prefix cache keeps
	defaultMaxBatch    = 64                      // requests one batch takes
	defaultPassTokens  = systemone.RowPassTokens // tokens of one model pass, and of one batch's share
	maxPassTokens      = 1 << 18                 // the largest Options.PassTokens: a pass's activations grow with it
	// attentionOnlyPrefixMinTokens is the shortest state cached on an attention-only (Qwen3, Qwen2.5) base, Kev's
	// prefix_min_tokens there; hybrid bases cache every state.
	attentionOnlyPrefixMinTokens = 384
)

// testBeforeTake, set by tests only, becomes the beforeTake hook of every replica of the predictors loaded after;
// it is called with the replica's index.
var testBeforeTake func(replica int)

// LoadError reports a checkpoint or base model that could not be loaded. File names the file or directory at
// fault (a path, or a hub name when the hub could not serve it); Err says what went wrong: a *NotFoundError when
// the name was found neither locally nor on the hub, an *fs.PathError for a file that could not be read, otherwise
// the loader's own message (its types are not part of the API: match on *LoadError and read File).
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
	Run            string  // Options.Name, else the checkpoint as given to Load (a path or hub name, not the resolved directory)
	Base           string  // head.pt's base model id, e.g. "Qwen/Qwen3.5-4B-Base"
	BaseRevision   string  // head.pt's base_revision ("" when none)
	LoRA           int     // adapter rank; 0 for full-weight checkpoints
	Device         Device  // the device as given in Options ("cpu" when none was)
	Replicas       int     // copies of the model, one per listed device (Stats.Replicas has each one's counters)
	Backend        string  // "go"
	DType          DType   // the parameters' type: Float32, BFloat16, Float16 or FP8
	Temperature    float64 // the head temperature in use
	MaxStateTokens int     // the state limit, the <state> token included
	TruncateStates bool    // long states are cut instead of refused
	ReleaseDate    string  // YYYY-MM-DD: the hub's last-modified date of the revision when known, else head.pt's mtime
	WeightBytes    int64   // bytes of model and head weights one replica's backend holds
	Hardware       string  // what the replicas run on, as their backends name it: "NVIDIA H100 80GB HBM3 (sm_90, …)", "CPU: fp32 avx512, …" (distinct names joined by "; ")
}

// Stats are a predictor's counters, as Kev's model card reports them: over all replicas, and per replica.
type Stats struct {
	PrefixCache PrefixCacheStats // the sums of the replicas' counters (bounds: each replica's)
	Batches     BatchStats       // the sums of the replicas' counters
	Graphs      *GraphStats      // nil when the backend captures no graphs (CPU)
	Replicas    []ReplicaStats   // one per replica, in the order of Options.Device
}

// ReplicaStats are one replica's counters.
type ReplicaStats struct {
	Device       Device // "cpu", "cuda:1"
	PrefixCache  PrefixCacheStats
	Batches      BatchStats
	QueuedTokens int // tokens of the requests it has queued or running: how long a new request would wait
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
	Requests int // requests answered (a request split over several batches counts once)
	Queued   int // requests waiting now
	Slices   int // batches that ran only part of a big request's rows, the rest left for later batches
}

// GraphStats count the device graphs the replicas' passes replay, summed over the replicas: graphs captured so
// far, kept now, pass records seen once and waiting to be captured, and captures that failed (those passes run
// eagerly); and the parts of passes (records) launched as graphs (Replays) and issued eagerly (Eager).
type GraphStats struct {
	Captured, Kept, Pending, Failed int
	Replays, Eager                  int
}

// Predictor answers questions about texts with a loaded Kev checkpoint. It is safe for concurrent use: requests
// are tokenised on the caller's goroutine and queued at one of its replicas (one per device of Options.Device),
// the one that will answer soonest; in each replica one goroutine owns the model, running what waits in batches.
type Predictor struct {
	info    Info
	opts    Options
	log     *slog.Logger
	tok     *tokenizer.Tokenizer
	engines []*engine

	mu       sync.Mutex // held while a request is sent to a replica
	closed   bool
	accepted int // requests queued since Load

	onBatch atomic.Pointer[func(int)] // receives every batch's answered requests (the HTTP server's metrics)
}

// Load loads a Kev checkpoint, a local directory or a hub name "org/name[@revision]", and starts its model
// goroutine. The base model is Options.Base, or head.pt's base at its base_revision; the tokenizer is the base's.
// Before it returns, every replica answers one made-up request and throws the answer away (a warm-up: kernels,
// workspaces and pooled memory are then in place, so the first request costs what the tenth does); the prefix
// cache and Stats are as if it never ran.
// Files that cannot be read are reported as a *LoadError naming the file. Load honours ctx: when it ends, Load
// stops at its next step (before the weights stream, before each replica's warm-up, before it returns), frees
// what it has loaded and returns ctx's error.
func Load(ctx context.Context, checkpointName string, opts Options) (*Predictor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Device == "" {
		opts.Device = CPU
	}
	replicas, err := opts.Device.replicas()
	if err != nil {
		return nil, err
	}
	dt, dtName, err := parseDType(opts.DType, replicas[0].name)
	if err != nil {
		return nil, err
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	switch {
	case opts.PassTokens == 0:
		opts.PassTokens = defaultPassTokens
	case opts.PassTokens < 0 || opts.PassTokens > maxPassTokens:
		return nil, &OptionError{Field: "PassTokens", Value: fmt.Sprint(opts.PassTokens), Reason: fmt.Sprintf("must be 0 (the default, %d) or 1 to %d", defaultPassTokens, maxPassTokens)}
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
	if opts.MaxQuestions < 0 {
		return nil, &OptionError{Field: "MaxQuestions", Value: fmt.Sprint(opts.MaxQuestions), Reason: "must be ≥ 0 (0: no limit)"}
	}
	backends, err := openReplicas(opts.Device, replicas)
	if err != nil {
		return nil, err
	}
	loaded := false
	defer func() {
		if !loaded {
			closeBackends(backends)
		}
	}()
	if err := setGraphs(opts.CUDAGraphs, backends); err != nil {
		return nil, err
	}
	if dtName == FP8 {
		if err := checkFP8(opts.DType, backends); err != nil {
			return nil, err
		}
	}
	fp8 := dtName == FP8

	runDir, runSnap, err := resolveModel(ctx, checkpointName, false, opts.Offline, false)
	if err != nil {
		return nil, err
	}
	headPath := filepath.Join(runDir, checkpoint.HeadFile)
	head, err := checkpoint.ReadHead(headPath)
	if err != nil {
		return nil, loadError(headPath, err)
	}
	baseDir, err := resolveBase(ctx, runDir, head, opts, !runSnap.Local)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
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
	copts := checkpoint.Options{DType: dt, ProductsF32: fp8} // fp8: product weights in fp32, quantized by the backend
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
	progress := &loadProgress{rep: prog, done: make([]int64, len(replicas))}
	ck, err := checkpoint.OpenStream(runDir, baseDir, checkpoint.StreamOptions{Options: copts, Progress: progress.of(0)})
	if err != nil {
		return nil, loadError(runDir, err)
	}
	if err := tok.CheckIDs(ck.Weights.Config.VocabSize); err != nil { // refused now, not at the first text using it
		ck.Close()
		return nil, &LoadError{File: tokPath, Err: err}
	}
	weightBytes, total := ck.Bytes(), ck.Bytes()
	progress.total = total
	temp := head.Temperature
	if opts.Temperature > 0 {
		temp = opts.Temperature
	}
	h := ck.Head
	for _, t := range []*qwen35.Tensor{h.QWeight, h.QBias, h.KWeight, h.KBias} {
		weightBytes += int64(qwen35Numel(t)) * 4
	}
	cfg := ck.Weights.Config // the loads below drop ck.Weights
	if opts.PrefixMinTokens == 0 && !cfg.Hybrid() {
		opts.PrefixMinTokens = attentionOnlyPrefixMinTokens
	}
	p := &Predictor{
		info: Info{
			Run: cmp.Or(opts.Name, checkpointName), Base: head.Base, BaseRevision: head.BaseRevision, LoRA: head.LoRA,
			Device: opts.Device, Replicas: len(replicas), Backend: "go", DType: dtName, Temperature: temp,
			MaxStateTokens: systemone.MaxStateTokens, TruncateStates: opts.TruncateStates,
			ReleaseDate: releaseDate(runSnap, headPath), WeightBytes: weightBytes, Hardware: describe(backends),
		},
		opts: opts, log: log, tok: tok,
	}
	// Every replica streams the weights to its own backend, all at once: the first from ck, the others each from a
	// stream of its own (a streamed tensor is built once and dropped after its upload). Progress counts them all.
	streams := make([]*checkpoint.Checkpoint, len(replicas))
	streams[0] = ck
	p.engines = make([]*engine, len(replicas))
	errs := make([]error, len(replicas))
	warmNs := make([]int64, len(replicas)) // the warm-up pass of each replica (see engine.warmUp)
	var keptBF16 []string                  // fp8: the product weights replica 0 holds in bf16 (layers.Model.KeptBF16)
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = ctx.Err(); errs[i] != nil {
				return
			}
			if i > 0 {
				s, err := checkpoint.OpenStream(runDir, baseDir, checkpoint.StreamOptions{Options: copts, Progress: progress.of(i)})
				if err != nil {
					errs[i] = loadError(runDir, err)
					return
				}
				streams[i] = s
			}
			model, err := layers.NewWith(b, streams[i].Weights, layers.Options{FP8: fp8})
			if err != nil {
				errs[i] = loadError(runDir, err)
				return
			}
			if i == 0 {
				keptBF16 = model.KeptBF16()
			}
			pointer, err := layers.NewPointer(b, h.QWeight, h.QBias, h.KWeight, h.KBias, temp)
			if err != nil {
				errs[i] = &LoadError{File: headPath, Err: err}
				return
			}
			e := newEngine(i, Device(replicas[i].String()), b, model, pointer, opts, &p.onBatch, log)
			// The CPU backend keeps unmerged 16-bit weights in the mapped files: those stay open until Close. Other
			// backends hold their own copies, so the files close now and the host memory of the load goes back.
			if b.Name() == "cpu" {
				e.files = streams[i]
			} else if err := streams[i].Close(); err != nil {
				errs[i] = loadError(runDir, err)
				return
			}
			streams[i].Weights = nil
			if errs[i] = ctx.Err(); errs[i] != nil { // the weights are in: the warm-up is the next long step
				e.files = nil // closed below with the streams
				return
			}
			if !testSkipWarmUp {
				t0 := time.Now()
				if err := p.warmReplica(e); err != nil {
					errs[i] = fmt.Errorf("kev: warm-up pass on replica %d (%s): %w", i, replicas[i], err)
					return
				}
				warmNs[i] = time.Since(t0).Nanoseconds()
			}
			p.engines[i] = e
		}()
	}
	wg.Wait()
	if errs[0] == nil {
		errs[0] = ctx.Err()
	}
	if err := errors.Join(errs...); err != nil {
		for _, s := range streams {
			if s != nil {
				s.Close() // the backends, closed by the deferred call, free what was uploaded
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // one error, errors.Is-able, instead of one per replica
		}
		return nil, err
	}
	progress.finish()
	if fp8 {
		p.info.WeightBytes += fp8WeightBytes(&cfg, total, keptBF16) - total
		if len(keptBF16) > 0 {
			log.Warn("kev: fp8: product weights kept in bf16: the GPU's FP8 products do not take their shapes",
				"weights", keptBF16)
		}
	}
	debug.FreeOSMemory()
	secs := time.Since(start).Seconds()
	loaded = true
	log.Info("kev: loaded", "run", checkpointName, "dir", runDir, "base", baseDir, "device", opts.Device,
		"replicas", len(replicas), "dtype", dtName, "temperature", temp, "weight_bytes", weightBytes,
		"seconds", round3(secs), "gb_per_s", round3(float64(total)*float64(len(replicas))/1e9/max(secs, 1e-9)),
		"warm_up_s", round3(float64(slices.Max(warmNs))/1e9))
	for _, e := range p.engines {
		go e.loop()
	}
	return p, nil
}

// resolveModel finds the directory of a model: a local directory as is (it must hold the required files),
// or a hub name through the hub cache. With hubOnly (a name read from a file that came from the hub), the name is
// only ever a hub name.
func resolveModel(ctx context.Context, name string, base, offline, hubOnly bool) (string, *hub.Snapshot, error) {
	required := []string{checkpoint.HeadFile}
	if base {
		required = []string{checkpoint.ConfigFile, "tokenizer.json"}
	}
	if name == "" {
		return "", nil, &LoadError{Err: errors.New("no checkpoint named")}
	}
	if hubOnly {
		// never a local directory
	} else if fi, err := os.Stat(name); err == nil {
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
		abs, _ := filepath.Abs(name)
		hint := "pass an existing checkpoint directory (head.pt with the adapter or full weights)"
		if base {
			hint = "pass an existing base model directory (config.json, tokenizer.json and the weights) as Options.Base (-base of the kev command)"
		}
		return "", nil, &LoadError{File: name, Err: &NotFoundError{Name: name, Local: abs, Hint: hint}}
	}
	if _, err := hub.ParseName(name); err != nil {
		return "", nil, &LoadError{File: name, Err: fmt.Errorf("neither a directory nor a hub name: %w", err)}
	}
	snap, err := hub.Fetch(ctx, name, hub.Options{Offline: offline, Required: required, HubOnly: hubOnly})
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
		nf := &NotFoundError{Name: name, Hub: err}
		if !hubOnly {
			nf.Local, _ = filepath.Abs(name)
		}
		switch {
		case base:
			nf.Hint = "pass the base model's directory or hub name as Options.Base (-base of the kev command)"
		default:
			nf.Hint = "pass a checkpoint directory (head.pt with the adapter or full weights) or a hub name org/name[@revision]"
		}
		if offline {
			nf.Hint += "; offline, only the hub's local cache was searched"
		}
		return "", nil, &LoadError{File: name, Err: nf}
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
// carries the tokenizer, else head.pt's base at its base_revision. The base named by a checkpoint from the hub
// (fromHub) must be a hub name, and is fetched from the hub even where a local directory has that name.
func resolveBase(ctx context.Context, runDir string, head *checkpoint.Head, opts Options, fromHub bool) (string, error) {
	if opts.Base != "" {
		dir, _, err := resolveModel(ctx, opts.Base, true, opts.Offline, false)
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
	if fromHub {
		headPath := filepath.Join(runDir, checkpoint.HeadFile)
		var err error
		if name, err = head.HubBase(headPath); err != nil {
			return "", loadError(headPath, err)
		}
	}
	dir, _, err := resolveModel(ctx, name, true, opts.Offline, fromHub)
	var nf *NotFoundError
	if errors.As(err, &nf) {
		nf.Local = "" // a hub name (head.pt's), whatever a directory of that name would be
		nf.Hint = fmt.Sprintf("%s names it as the base model; pass a local copy of it (config.json, tokenizer.json and the weights) as Options.Base (-base of the kev command), or let Load reach the hub",
			filepath.Join(runDir, checkpoint.HeadFile))
		if opts.Offline {
			nf.Hint += " (offline, only the hub's local cache was searched)"
		}
	}
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

// describe joins the distinct hardware names of the backends (tensor.Describer), in order.
func describe(backends []tensor.Backend) string {
	var names []string
	for _, b := range backends {
		if d, ok := b.(tensor.Describer); ok && !slices.Contains(names, d.Describe()) {
			names = append(names, d.Describe())
		}
	}
	return strings.Join(names, "; ")
}

// Stats returns the prefix caches' and the batchers' counters, summed over the replicas and per replica.
func (p *Predictor) Stats() Stats {
	var st Stats
	for i, e := range p.engines {
		r := e.stats()
		st.Replicas = append(st.Replicas, r)
		pc, b := &st.PrefixCache, &st.Batches
		if i == 0 {
			pc.Size, pc.MinStateTokens, pc.MaxTokens = r.PrefixCache.Size, r.PrefixCache.MinStateTokens, r.PrefixCache.MaxTokens
		}
		pc.Hits += r.PrefixCache.Hits
		pc.Misses += r.PrefixCache.Misses
		pc.CachedStates += r.PrefixCache.CachedStates
		pc.OOMRetries += r.PrefixCache.OOMRetries
		b.Count += r.Batches.Count
		b.Requests += r.Batches.Requests
		b.Queued += r.Batches.Queued
		b.Slices += r.Batches.Slices
		if g, ok := e.backend.(graphStatser); ok {
			if c, k, p, f, rp, ea, on := g.GraphStats(); on {
				if st.Graphs == nil {
					st.Graphs = &GraphStats{}
				}
				st.Graphs.Captured += c
				st.Graphs.Kept += k
				st.Graphs.Pending += p
				st.Graphs.Failed += f
				st.Graphs.Replays += rp
				st.Graphs.Eager += ea
			}
		}
	}
	return st
}

// graphSetter is a backend that replays passes as device graphs and keeps as many as it is told (0: none).
type graphSetter interface {
	SetGraphs(max int) error
}

// setGraphs applies Options.CUDAGraphs to the backends: 0 leaves each its default, n < 0 turns graphs off, n > 0
// keeps n graphs (an *OptionError on a backend that has none).
func setGraphs(n int, backends []tensor.Backend) error {
	if n == 0 {
		return nil
	}
	for _, b := range backends {
		g, ok := b.(graphSetter)
		if !ok {
			if n < 0 {
				continue // off already
			}
			return &OptionError{Field: "CUDAGraphs", Value: fmt.Sprint(n), Reason: "the " + b.Name() + " backend replays no graphs (pass 0, or a CUDA device)"}
		}
		if err := g.SetGraphs(max(n, 0)); err != nil {
			return &OptionError{Field: "CUDAGraphs", Value: fmt.Sprint(n), Reason: err.Error()}
		}
	}
	return nil
}

// graphStatser is a backend that replays passes as device graphs (the CUDA backend): its counters, and whether
// graphs are on.
type graphStatser interface {
	GraphStats() (captured, kept, pending, failed, replays, eager int, on bool)
}

// Ask answers questions about a state, as a System One request with the default model name would. The state is
// text (a string) or structured content: anything ValueOf takes, such as a map[string]any, an Object, a slice or
// a Value.
func (p *Predictor) Ask(ctx context.Context, state any, questions ...QuestionEntry) ([]AnswerEntry, error) {
	req, err := askRequest(state, questions)
	if err != nil {
		return nil, err
	}
	resp, err := p.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Answers, nil
}

// askRequest is the System One request Ask sends: the state as text (a string) or as structured content (anything
// ValueOf takes) and the questions.
func askRequest(state any, questions []QuestionEntry) (*Request, error) {
	req := &Request{Questions: questions}
	if s, ok := state.(string); ok {
		req.State = Text(s)
		return req, nil
	}
	v, err := ValueOf(state)
	if err != nil {
		return nil, err
	}
	req.State = v
	return req, nil
}

// Do answers a System One request. The request is validated, rendered and encoded on the caller's goroutine:
// a *ValidationError, *StateTooLongError, *RowTooLongError or *TooManyQuestionsError comes back before the request
// is queued. Otherwise it is queued at the replica that will answer it soonest and waits for its model goroutine,
// which runs it in a batch with whatever else is waiting (a request bigger than one pass runs in slices over
// several batches, other requests between them); the response's LatencyMS is the model time of the batches it ran
// in. If ctx ends while the request waits, Do returns ctx.Err() at once and the request is skipped (a big one
// between its slices); a running pass stops at its next layer once every request it and the batch's later passes
// work for has gone, freeing the model for the next batch. After Close, Do returns ErrClosed.
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
	if limit := p.opts.MaxQuestions; limit > 0 && len(rec.Questions) > limit {
		return nil, nil, result{}, &systemone.TooManyQuestionsError{Questions: len(rec.Questions), Limit: limit}
	}
	enc, err := systemone.Encode(p.tok, rec, systemone.EncodeOptions{Truncate: p.opts.TruncateStates})
	if err != nil {
		return nil, nil, result{}, err
	}
	release, err := systemone.AdmitTokens(ctx, enc.InputTokens()) // the HTTP server's bound on tokens in flight
	if err != nil {
		return nil, nil, result{}, err
	}
	defer release()
	c := newCall(ctx, enc)
	c.part = req.Part()
	if err := p.dispatch(c); err != nil {
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

// dispatch queues c at the replica that will answer it soonest: the one with the fewest tokens queued and
// running once c's are added, where c's state costs nothing on a replica that has it cached or queued already (a
// request prefers the replica holding its state). Ties go to the first replica.
func (p *Predictor) dispatch(c *call) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	var best *engine
	bestWait, bestCost := 0, 0
	for _, e := range p.engines {
		cost := e.cost(c)
		if wait := e.load() + cost; best == nil || wait < bestWait {
			best, bestWait, bestCost = e, wait, cost
		}
	}
	if err := best.enqueue(c, bestCost); err != nil {
		return err
	}
	p.accepted++
	return nil
}

// Close stops taking requests, lets every replica finish the requests already queued, then frees the model's
// cached states and closes the backends. Later calls return ErrClosed; closing again does nothing. Shutdown bounds
// the wait with a context.
func (p *Predictor) Close() error { return p.Shutdown(context.Background()) }

// Shutdown is Close bounded by ctx: it stops taking requests and lets every replica finish the requests queued
// until ctx ends. Then each running pass stops at its next layer, the requests still queued or running get
// ErrClosed, and once the replicas have freed their memory Shutdown returns ctx's error.
func (p *Predictor) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		for _, e := range p.engines {
			<-e.done
		}
		return nil
	}
	var aborted atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		aborted.Store(true)
		for _, e := range p.engines {
			e.abortNow()
		}
	})
	errs := make([]error, len(p.engines))
	var wg sync.WaitGroup
	for i, e := range p.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.close()
		}()
	}
	wg.Wait()
	stop()
	if aborted.Load() {
		errs = append(errs, ctx.Err())
		p.log.Info("kev: closed, the requests left failed", "error", ctx.Err())
	} else {
		p.log.Info("kev: closed")
	}
	return errors.Join(errs...)
}

func (p *Predictor) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// loadProgress sums the progress of the streamed loads of several replicas into one report.
type loadProgress struct {
	rep   *loadprogress.Reporter // nil: no report
	mu    sync.Mutex
	done  []int64 // bytes uploaded, per replica
	total int64   // bytes of one replica's weights, once a stream has reported
}

// of returns the Progress function of replica i's stream (nil when nothing is reported).
func (lp *loadProgress) of(i int) func(done, total int64) {
	if lp.rep == nil {
		return nil
	}
	return func(done, total int64) {
		lp.mu.Lock()
		lp.done[i], lp.total = done, total
		var sum int64
		for _, d := range lp.done {
			sum += d
		}
		lp.mu.Unlock()
		lp.rep.Update(sum, total*int64(len(lp.done)))
	}
}

// finish reports the load complete.
func (lp *loadProgress) finish() {
	if lp.rep == nil {
		return
	}
	lp.mu.Lock()
	t := lp.total * int64(len(lp.done))
	lp.mu.Unlock()
	lp.rep.Done(t, t)
}
