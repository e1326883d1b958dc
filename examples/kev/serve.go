package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/server"
)

func init() {
	commands["serve"] = serveCommand
	summaries["serve"] = "serve Kev's System One HTTP API (POST /v1/systemone, GET /v1/models, ...)"
}

// serveConfig is everything serve needs: the model to load, where to listen, and the handler's options.
type serveConfig struct {
	run   string
	opts  kev.Options
	addr  string
	drain time.Duration
	hopts server.Options
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
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	return serve(ctx, cfg)
}

// serveConfigFrom reads the flags and the KEV_* environment (flags win where both exist).
func serveConfigFrom(args []string, getenv func(string) string) (serveConfig, error) {
	fs := newFlags("serve", "[-addr HOST:PORT] [-checkpoint DIR|NAME] [-base DIR|NAME] [-device cpu|cuda[:N[,N...]]|cuda:all] [-dtype fp32]")
	var mf modelFlags
	mf.register(fs)
	cfg := serveConfig{}
	addr := getenv("KEV_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8008"
	}
	fs.StringVar(&cfg.addr, "addr", addr, "listen address (KEV_ADDR)")
	fs.DurationVar(&cfg.drain, "drain", time.Minute, "at SIGINT/SIGTERM, after the drain grace, the longest wait for requests still in flight")
	limits := envReader{getenv: getenv}
	limitFlags(fs, &limits, &cfg.hopts)
	if err := parseFlags(fs, args); err != nil {
		return cfg, err
	}
	if limits.err != nil {
		return cfg, limits.err
	}
	zeroMeansNone(&cfg.hopts)
	if mf.checkpoint == "" {
		mf.checkpoint = getenv("KEV_RUN")
	}
	run, opts, err := mf.options()
	if err != nil {
		return cfg, err
	}
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
	if env.err != nil {
		return cfg, env.err
	}
	cfg.opts = opts
	cfg.hopts.APIKey = getenv("KEV_API_KEY")
	cfg.hopts.DrainTimeout = cfg.drain
	return cfg, nil
}

// limitFlags registers the HTTP server's limits, each defaulting to its KEV_* variable, else the server's
// default. 0 or a negative value turns a limit off (but for -max-header-bytes).
func limitFlags(fs *flag.FlagSet, env *envReader, o *server.Options) {
	fs.DurationVar(&o.BodyTimeout, "body-timeout", env.duration("KEV_BODY_TIMEOUT", server.DefaultBodyTimeout),
		"longest time to receive a request body; slower clients get 408 (KEV_BODY_TIMEOUT)")
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
	fs.DurationVar(&o.DrainGrace, "drain-grace", env.duration("KEV_DRAIN_GRACE", server.DefaultDrainGrace),
		"at SIGINT/SIGTERM, how long the listener stays open answering 503 (and /readyz 503) before it closes (KEV_DRAIN_GRACE)")
}

// zeroMeansNone turns the limits given as 0 into "none" (negative): the flags show their real defaults, so a 0
// there asks for no limit, where server.Options' 0 would mean the default.
func zeroMeansNone(o *server.Options) {
	for _, d := range []*time.Duration{&o.BodyTimeout, &o.IdleTimeout, &o.ReadHeaderTimeout, &o.DrainGrace} {
		if *d == 0 {
			*d = -1
		}
	}
	for _, n := range []*int{&o.MaxConns, &o.MaxInflightTokens} {
		if *n == 0 {
			*n = -1
		}
	}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = -1
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
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg.opts.Logger = log
	p, err := kev.Load(ctx, cfg.run, cfg.opts)
	if err != nil {
		return err
	}
	defer p.Close()
	cfg.hopts.Logger = log
	h := server.New(p, cfg.hopts)
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	info := p.Info()
	auth := "open"
	if cfg.hopts.APIKey != "" {
		auth = "KEV_API_KEY required"
	}
	log.Info("kev: serving", "run", info.Run, "base", info.Base, "device", info.Device, "dtype", info.DType,
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
