package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/loadprogress"
	"github.com/kevgo/kev/server"
)

func init() {
	commands["serve"] = serveCommand
	summaries["serve"] = "serve Kev's System One HTTP API (POST /v1/systemone, GET /v1/models, ...)"
}

// serveConfig is everything serve needs: the model to load, where to listen, how to log, and the handler's
// options.
type serveConfig struct {
	run   string // "" for the bundled test checkpoint
	opts  kev.Options
	addr  string
	drain time.Duration
	hopts server.Options
	log   logConfig
}

// serveEnv lists every environment variable kev serve reads, with its meaning, for serve -h.
// TestServeHelpListsEnvironment checks that every KEV_ name the command's code uses is here.
var serveEnv = []struct{ name, meaning string }{
	{"KEV_ADDR", "listen address, as -addr (default 127.0.0.1:8008)"},
	{"KEV_RUN", "the Kev checkpoint, as -checkpoint"},
	{"KEV_DTYPE", "weight and compute type, as -dtype: fp32, bf16, fp16 or fp8"},
	{"KEV_API_KEY", "when set, every model endpoint requires \"Authorization: Bearer <key>\" (401 otherwise)"},
	{"KEV_PREFIX_CACHE", "states the prefix cache keeps (default 4; 0 disables it)"},
	{"KEV_PREFIX_MIN_TOKENS", "shortest state the prefix cache keeps, in tokens (default 0)"},
	{"KEV_PREFIX_MAX_TOKENS", "state tokens the prefix cache holds in all; a longer state is never cached (default 65536)"},
	{"KEV_TRUNCATE_STATES", "1: read only the first 65,536 tokens of a longer state (responses say truncated) instead of answering 422"},
	{"KEV_DATE_FACTS", "1: add the days between the dates a state mentions to it (date_facts), as Kev does"},
	{"KEV_TEMPERATURE", "> 0: overrides head.pt's temperature"},
	{"KEV_LORA_SCALE", "> 0: scales the LoRA adapter (default 1)"},
	{"KEV_MAX_QUESTIONS", "> 0: refuse (422) a request with more questions; 0, the default: no limit, as Kev"},
	{"KEV_PASS_TOKENS", "tokens one model pass takes, and one batch's budget, as -pass-tokens (default 16384)"},
	{"KEV_BODY_TIMEOUT", "as -body-timeout (default 60s; 0: none)"},
	{"KEV_MIN_BODY_RATE", "as -min-body-rate (default 16384 bytes a second; 0: none)"},
	{"KEV_BODY_RATE_GRACE", "as -body-rate-grace (default 5s; 0: the rate applies from the first byte)"},
	{"KEV_FIRST_BYTE_TIMEOUT", "as -first-byte-timeout (default 5s; 0: none)"},
	{"KEV_HEADER_TIMEOUT", "as -header-timeout (default 10s; 0: none)"},
	{"KEV_IDLE_TIMEOUT", "as -idle-timeout (default 75s; 0: none)"},
	{"KEV_MAX_HEADER_BYTES", "as -max-header-bytes (default 65536)"},
	{"KEV_MAX_CONNS", "as -max-conns (default 1024; 0: none)"},
	{"KEV_MAX_INFLIGHT_BYTES", "as -max-inflight-bytes (default 128 MiB; 0: none)"},
	{"KEV_MAX_INFLIGHT_TOKENS", "as -max-inflight-tokens (default 4194304; 0: none)"},
	{"KEV_CLIENT_SHARE", "as -client-share (default 0: none)"},
	{"KEV_DRAIN_GRACE", "as -drain-grace (default 5s, none in a terminal; 0: none)"},
	{"KEV_CUDA_GRAPHS", "with -device cuda: on, or how many pass graphs to keep, replays passes as CUDA graphs (default off)"},
	{"KEV_LOG_FORMAT", "as -log-format"},
	{"KEV_LOG_LEVEL", "as -log-level"},
	{"HF_HOME, HF_HUB_CACHE", "where hub models are cached (default ~/.cache/huggingface/hub)"},
	{"HF_TOKEN, HF_TOKEN_PATH", "the Hugging Face token for gated or private models"},
	{"HF_HUB_OFFLINE", "1: read hub models from the cache only, as -offline"},
	{"HF_ENDPOINT", "the hub's URL"},
}

// serveReady, when set, is told the listening address once the server accepts requests (tests use it).
var serveReady func(addr string)

// The signals that stop the server gracefully.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func serveCommand(args []string) error {
	cfg, err := serveConfigFrom(args, os.Getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	go watchSignals(sigs, cancel, func() {
		fmt.Fprintln(stderr, "kev serve: second signal: stopping now, without draining")
		forceExit(1)
	})
	return serve(ctx, cfg)
}

// forceExit ends the process at a second stop signal (a variable for tests).
var forceExit = os.Exit

// watchSignals stops serving gracefully at the first signal (cancel) and forcibly at the second (force).
func watchSignals(sigs <-chan os.Signal, cancel, force func()) {
	if _, ok := <-sigs; !ok {
		return
	}
	cancel()
	if _, ok := <-sigs; ok {
		force()
	}
}

// interactive reports whether kev serve runs in a terminal (standard error is one): there Ctrl-C stops it with no
// drain grace unless one is set, since no load balancer needs the time to see /readyz fail.
var interactive = func() bool { return loadprogress.Terminal() != nil }

// serveConfigFrom reads the flags and the KEV_* environment (flags win where both exist).
func serveConfigFrom(args []string, getenv func(string) string) (serveConfig, error) {
	const synopsis = "[-addr HOST:PORT] [-checkpoint DIR|NAME] [-base DIR|NAME] [-device cpu|cuda[:N[,N...]]|cuda:all] [-dtype fp32] [-log-format text|json] [-log-level info]"
	fs := newFlags("serve", synopsis)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: kev serve %s\n\n", synopsis)
		fmt.Fprint(w, `Serves Kev's System One HTTP API: POST /v1/systemone, /v1/systemone/permute, /v1/systemone/separate,
GET /v1/models, /healthz, /readyz, /metrics, /openapi.json. SIGINT or SIGTERM: new requests get 503, those
inside are answered, then it exits; a second signal stops it at once. In a terminal there is no drain grace
unless -drain-grace or KEV_DRAIN_GRACE sets one, so an idle server stops at Ctrl-C.

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprint(w, "\nEnvironment (flags win over it):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, e := range serveEnv {
			fmt.Fprintf(tw, "  %s\t%s\n", e.name, e.meaning)
		}
		tw.Flush()
	}
	var mf modelFlags
	mf.register(fs)
	cfg := serveConfig{}
	addr := getenv("KEV_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8008"
	}
	fs.StringVar(&cfg.addr, "addr", addr, "listen address (KEV_ADDR)")
	fs.DurationVar(&cfg.drain, "drain", time.Minute, "at SIGINT/SIGTERM, after the drain grace, the longest wait for requests still in flight")
	cfg.log.register(fs, getenv)
	limits := envReader{getenv: getenv}
	limitFlags(fs, &limits, &cfg.hopts)
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	if err := cfg.log.check(); err != nil {
		return cfg, err
	}
	if limits.err != nil {
		return cfg, limits.err
	}
	if s := cfg.hopts.ClientShare; s < 0 || s >= 1 {
		return cfg, usagef("-client-share %v: want a number from 0 (none) up to, not including, 1", s)
	}
	graceSet := getenv("KEV_DRAIN_GRACE") != ""
	fs.Visit(func(f *flag.Flag) { graceSet = graceSet || f.Name == "drain-grace" })
	if !graceSet && interactive() {
		cfg.hopts.DrainGrace = 0 // none (zeroMeansNone): an idle server stops at once
	}
	zeroMeansNone(&cfg.hopts)
	if mf.checkpoint == "" {
		mf.checkpoint = getenv("KEV_RUN")
	}
	if mf.dtype == "" {
		mf.dtype = getenv("KEV_DTYPE")
	}
	run, opts := mf.options()
	cfg.run = run
	env := envReader{getenv: getenv}
	if n, ok := env.int("KEV_PREFIX_CACHE"); ok {
		opts.PrefixCache = n
		if n == 0 {
			opts.PrefixCache = -1 // Kev's 0 disables the cache; Options' 0 is the default
		}
	}
	opts.PrefixMinTokens, _ = env.int("KEV_PREFIX_MIN_TOKENS")
	opts.PrefixMaxTokens, _ = env.int("KEV_PREFIX_MAX_TOKENS")
	opts.DateFacts = env.bool("KEV_DATE_FACTS")
	opts.TruncateStates = env.bool("KEV_TRUNCATE_STATES")
	opts.Temperature = env.float("KEV_TEMPERATURE")
	opts.LoRAScale = env.float("KEV_LORA_SCALE")
	opts.MaxQuestions, _ = env.int("KEV_MAX_QUESTIONS")
	if opts.PassTokens == 0 {
		opts.PassTokens, _ = env.int("KEV_PASS_TOKENS")
	}
	if env.err != nil {
		return cfg, env.err
	}
	cfg.opts = opts
	cfg.hopts.APIKey = getenv("KEV_API_KEY")
	cfg.hopts.DrainTimeout = cfg.drain
	return cfg, nil
}

// limitFlags registers the HTTP server's limits, each defaulting to its KEV_* variable, else the server's
// default. 0 or a negative value turns a limit off (but for -max-header-bytes; -body-rate-grace 0 applies the
// minimum rate from a body's first byte; -client-share 0 is the default, none).
func limitFlags(fs *flag.FlagSet, env *envReader, o *server.Options) {
	fs.DurationVar(&o.BodyTimeout, "body-timeout", env.duration("KEV_BODY_TIMEOUT", server.DefaultBodyTimeout),
		"longest time to receive a request body; slower clients get 408 (KEV_BODY_TIMEOUT)")
	fs.Int64Var(&o.MinBodyRate, "min-body-rate", int64(env.signed("KEV_MIN_BODY_RATE", server.DefaultMinBodyRate)),
		"slowest a request body may arrive, in bytes a second, once -body-rate-grace has passed; a body behind that pace gets 408 and its connection is closed (KEV_MIN_BODY_RATE)")
	fs.DurationVar(&o.BodyRateGrace, "body-rate-grace", env.duration("KEV_BODY_RATE_GRACE", server.DefaultBodyRateGrace),
		"how long a request body may take, from the end of its header, before -min-body-rate applies (KEV_BODY_RATE_GRACE)")
	fs.DurationVar(&o.FirstByteTimeout, "first-byte-timeout", env.duration("KEV_FIRST_BYTE_TIMEOUT", server.DefaultFirstByteTimeout),
		"close a new connection that sends nothing for this long (KEV_FIRST_BYTE_TIMEOUT)")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", env.duration("KEV_IDLE_TIMEOUT", server.DefaultIdleTimeout),
		"close keep-alive connections idle this long (KEV_IDLE_TIMEOUT)")
	fs.DurationVar(&o.ReadHeaderTimeout, "header-timeout", env.duration("KEV_HEADER_TIMEOUT", server.DefaultReadHeaderTimeout),
		"longest time to receive a request's header (KEV_HEADER_TIMEOUT)")
	fs.IntVar(&o.MaxHeaderBytes, "max-header-bytes", env.signed("KEV_MAX_HEADER_BYTES", server.DefaultMaxHeaderBytes),
		"largest request header; larger ones get 431 (KEV_MAX_HEADER_BYTES)")
	fs.IntVar(&o.MaxConns, "max-conns", env.signed("KEV_MAX_CONNS", server.DefaultMaxConns),
		"most connections open at once; more wait to be accepted (KEV_MAX_CONNS)")
	fs.Int64Var(&o.MaxInflightBytes, "max-inflight-bytes", int64(env.signed("KEV_MAX_INFLIGHT_BYTES", server.DefaultMaxInflightBytes)),
		"most request-body bytes read and answered at once; more get 503 with Retry-After (KEV_MAX_INFLIGHT_BYTES)")
	fs.IntVar(&o.MaxInflightTokens, "max-inflight-tokens", env.signed("KEV_MAX_INFLIGHT_TOKENS", server.DefaultMaxInflightTokens),
		"most encoded tokens queued for or inside the model at once; more get 503 with Retry-After (KEV_MAX_INFLIGHT_TOKENS)")
	fs.Float64Var(&o.ClientShare, "client-share", env.share("KEV_CLIENT_SHARE"),
		"the most of -max-inflight-bytes and of -max-inflight-tokens that the requests of one client address may hold at once, a fraction below 1 (0: none); past it the client gets 429 with Retry-After. Keep it 0 behind a reverse proxy, where every request has the proxy's address (KEV_CLIENT_SHARE)")
	fs.DurationVar(&o.DrainGrace, "drain-grace", env.duration("KEV_DRAIN_GRACE", server.DefaultDrainGrace),
		"at SIGINT/SIGTERM, how long the listener stays open answering 503 (and /readyz 503) before it closes (KEV_DRAIN_GRACE)")
}

// zeroMeansNone turns the limits given as 0 into "none" (negative): the flags show their real defaults, so a 0
// there asks for no limit, where server.Options' 0 would mean the default.
func zeroMeansNone(o *server.Options) {
	for _, d := range []*time.Duration{&o.BodyTimeout, &o.IdleTimeout, &o.ReadHeaderTimeout, &o.DrainGrace,
		&o.FirstByteTimeout, &o.BodyRateGrace} {
		if *d == 0 {
			*d = -1
		}
	}
	for _, n := range []*int{&o.MaxConns, &o.MaxInflightTokens} {
		if *n == 0 {
			*n = -1
		}
	}
	for _, n := range []*int64{&o.MaxInflightBytes, &o.MinBodyRate} {
		if *n == 0 {
			*n = -1
		}
	}
}

// duration reads a Go duration ("30s", "2m"), def when unset.
func (e *envReader) duration(name string, def time.Duration) time.Duration {
	v := e.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.fail(name, v, "a duration such as 30s")
		return def
	}
	return d
}

// signed reads a whole number (negative: no limit), def when unset.
func (e *envReader) signed(name string, def int) int {
	v := e.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, "a whole number")
		return def
	}
	return n
}

// envReader parses KEV_* variables, keeping the first error.
type envReader struct {
	getenv func(string) string
	err    error
}

func (e *envReader) fail(name, v, want string) {
	if e.err == nil {
		e.err = usagef("%s=%q: want %s", name, v, want)
	}
}

func (e *envReader) int(name string) (int, bool) {
	v := e.getenv(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		e.fail(name, v, "a whole number ≥ 0")
		return 0, false
	}
	return n, true
}

func (e *envReader) bool(name string) bool {
	switch v := e.getenv(name); v {
	case "", "0", "false", "no", "off":
		return false
	case "1", "true", "yes", "on":
		return true
	default:
		e.fail(name, v, "1 or 0")
		return false
	}
}

// share reads a fraction from 0 up to, not including, 1; 0 when unset.
func (e *envReader) share(name string) float64 {
	v := e.getenv(name)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f >= 1 {
		e.fail(name, v, "a number from 0 up to, not including, 1")
		return 0
	}
	return f
}

func (e *envReader) float(name string) float64 {
	v := e.getenv(name)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		e.fail(name, v, "a number > 0")
		return 0
	}
	return f
}

// serve loads the model, serves it until ctx ends, then drains (server.Handler.Serve): /readyz and the model
// endpoints answer 503 with Connection: close for the drain grace while the listener stays open, then the listener
// closes and every request already inside is answered (within cfg.drain); the model finishes what it queued
// before it is closed.
func serve(ctx context.Context, cfg serveConfig) error {
	log := cfg.log.logger(stderr)
	cfg.opts.Logger = log
	if cfg.run == "" {
		log.Warn("kev: no checkpoint given (-checkpoint or KEV_RUN): serving the small random test checkpoint built into the binary; its answers are exact but meaningless")
	}
	p, err := loadModel(ctx, cfg.run, cfg.opts)
	if err != nil {
		return err
	}
	defer p.Close()
	cfg.hopts.Logger = log
	h := server.New(p.Predictor, cfg.hopts)
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	info := p.Info()
	auth := "open"
	if cfg.hopts.APIKey != "" {
		auth = "KEV_API_KEY required"
	}
	log.Info("kev: serving", "version", versionOf(readBuildInfo()).Version, "run", p.name, "base", info.Base, "device", info.Device, "dtype", info.DType,
		"url", "http://"+ln.Addr().String(), "auth", auth)
	if serveReady != nil {
		serveReady(ln.Addr().String())
	}
	err = h.Serve(ctx, ln)
	if ctx.Err() == nil {
		return err // serving failed
	}
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("kev: stopped")
	return nil
}
