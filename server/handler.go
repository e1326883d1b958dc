// Package server is Kev's System One HTTP API over a loaded kev.Predictor, as an http.Handler: the endpoints of
// Kev's server with its exact bodies (FastAPI's 422s, 404s and 405s included), bearer-key auth, CORS, request ids,
// Server-Timing, health probes for load balancers, and Prometheus metrics as a prometheus.Collector. Bodies have a
// size limit and a read timeout, and the bodies and tokens of the requests in flight are bounded (503 with
// Retry-After past them); Handler.Serve adds the connection limits and a drain for load balancers.
//
//	p, err := kev.Load(ctx, "jaredpalmer/kev-4b", kev.Options{})
//	...
//	h := server.New(p, server.Options{APIKey: os.Getenv("KEV_API_KEY")})
//	ln, err := net.Listen("tcp", ":8000")
//	...
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
//	defer stop()
//	err = h.Serve(ctx, ln) // or http.ListenAndServe(":8000", h), without Serve's connection limits and drain
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// DefaultMaxBodyBytes is the largest request body a Handler reads unless Options say otherwise: room for a
// 65,536-token state several times over.
const DefaultMaxBodyBytes = 32 << 20

// The header names the handler reads and writes.
const (
	requestIDHeader    = "X-Typesafe-Request-Id" // echoed when the request sends one, else a fresh UUID4 (hex)
	maxRequestIDBytes  = 128                     // a longer request id is replaced by a fresh one
	serverTimingHeader = "Server-Timing"         // app;dur=<milliseconds in the process, one decimal>
)

// Options configure a Handler and, for Serve, its HTTP server. The zero value serves open (no key), with a 32 MiB
// body limit and the defaults below, and logs to slog.Default. For the timeouts, the connection cap and the
// in-flight bounds, 0 means the default and a negative value means none.
type Options struct {
	// APIKey, when not empty, makes every path that starts with /v1 require the header
	// "Authorization: Bearer <APIKey>", the key compared in constant time (Kev's KEV_API_KEY). The scheme word may
	// be in any case ("bearer", as RFC 7235 and FastAPI's HTTPBearer allow; Kev's own server wants "Bearer").
	// The health probes, /metrics and /openapi.json never need it.
	APIKey string

	// AuthPreflight reproduces a quirk of Kev's server: with a key set, a CORS preflight (OPTIONS) to /v1 gets the
	// 401, since browsers never send credentials on a preflight, and a browser client cannot then call it. By
	// default preflights are answered without a key, and 401s carry the CORS headers too.
	AuthPreflight bool

	// MaxBodyBytes limits a request body; a larger one gets 413. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// BodyTimeout bounds the time to receive a request body, from when its header has been read: a slower client
	// gets 408 and its connection is closed. 0 means DefaultBodyTimeout.
	BodyTimeout time.Duration

	// MinBodyRate is the slowest a body may arrive, in bytes a second, once BodyRateGrace has passed since its
	// header: a body behind that pace gets 408 and its connection is closed (one byte every 10 s is cut at the
	// grace, not at BodyTimeout). 0 means DefaultMinBodyRate; negative, none.
	MinBodyRate int64
	// BodyRateGrace is how long a body may take before MinBodyRate applies. 0 means DefaultBodyRateGrace.
	BodyRateGrace time.Duration

	// MaxInflightBytes bounds the bodies of the model requests being read and answered at once: a request whose
	// body would go past it gets 503 with Retry-After, before its body is read when it declares its length. It is
	// never less than MaxBodyBytes. 0 means DefaultMaxInflightBytes.
	MaxInflightBytes int64

	// MaxInflightTokens bounds the encoded tokens of the model requests queued or running at once: one that would
	// go past it gets 503 with Retry-After (a request larger than the bound still runs when it is alone).
	// 0 means DefaultMaxInflightTokens.
	MaxInflightTokens int

	// ClientShare, in (0, 1), is the most of MaxInflightBytes and of MaxInflightTokens that the requests of one
	// client (one remote address) may hold at once: past it the client gets 429 with Retry-After while others keep
	// the rest (a client holding nothing may always send one request). 0 means none: behind a reverse proxy every
	// request comes from the proxy's address, and the proxy should keep per-client shares.
	ClientShare float64

	// RetryAfter is the Retry-After of a 503 for a server over MaxInflightBytes or MaxInflightTokens, in whole
	// seconds. 0 means DefaultRetryAfter.
	RetryAfter time.Duration

	// The HTTP server's limits, used by Serve (set them on your own http.Server otherwise).

	// FirstByteTimeout bounds the time from a new connection to its first byte: a connection that sends nothing
	// is closed then. 0 means DefaultFirstByteTimeout; negative, none.
	FirstByteTimeout time.Duration
	// ReadHeaderTimeout bounds the time to read a request's header, from its first byte (the first byte of a new
	// connection is bounded by FirstByteTimeout; of the next request on a keep-alive one, by IdleTimeout).
	// 0 means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (a larger one gets 431). 0 or negative means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConns bounds the open connections. When all are open and a client connects, the connection waiting
	// longest for a request (one that has sent nothing yet, or an idle keep-alive one) is closed to make room;
	// only when every connection is inside a request does the new one wait. 0 means DefaultMaxConns.
	MaxConns int
	// DrainGrace is how long Serve keeps its listener open after ctx ends, answering 503 with Connection: close
	// (and /readyz 503) while requests in flight finish, so that load balancers see the server go unready before
	// it stops listening. 0 means DefaultDrainGrace.
	DrainGrace time.Duration
	// DrainTimeout is how long Serve then waits for requests still in flight after the listener closes. 0 means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration

	// Logger gets one record per request and every server error. Nil: slog.Default().
	Logger *slog.Logger
}

// model is what a Handler serves: it answers System One requests (admission errors before queueing; safe for
// concurrent use, requests that arrive together may be batched inside it), describes itself for GET /v1/models
// and counts output tokens for /v1/systemone/separate.
type model interface {
	Do(ctx context.Context, req *systemone.Request) (*systemone.Response, error)
	Card() systemone.ModelCard
	Tokenizer() systemone.Tokenizer
}

// Handler serves Kev's System One HTTP API over a predictor:
//
//	POST /v1/systemone            a state and typed questions in, typed answers out
//	POST /v1/systemone/permute    one choice question under n_perm option orders
//	POST /v1/systemone/separate   each question answered alone on the same state
//	GET  /v1/models               the model card under both model names, with serving counters
//	GET  /healthz                 liveness: 200 while the process serves HTTP (never behind the key)
//	GET  /readyz                  readiness: 200, or 503 while draining or stopped (never behind the key)
//	GET  /openapi.json            a short OpenAPI description (never behind the key)
//	GET  /metrics                 Prometheus text metrics of this handler (never behind the key)
//
// Every response carries X-Typesafe-Request-Id and Server-Timing; bodies are compact JSON. Unknown paths and
// methods get FastAPI's 404 and 405 bodies. After Stop, the model endpoints answer 503.
//
// A Handler is also a prometheus.Collector: register it with a service's own registry to export its metrics
// there (names start with kev_).
type Handler struct {
	model   model
	opts    Options
	tok     systemone.Tokenizer
	metrics *metrics
	gather  http.Handler // GET /metrics: this handler's own registry
	log     *slog.Logger
	key     []byte         // the API key, or nil when open
	bytes   budget         // body bytes in flight
	tokens  budget         // encoded tokens in flight
	conns   *limitListener // Serve's listener, when it bounds connections

	draining atomic.Bool
	stopping atomic.Bool
	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed when inflight drops to 0 after Stop
}

// New returns a Handler serving p. The handler's batch-size histogram counts p's batches from then on (those of
// the last Handler made for p).
func New(p *kev.Predictor, opts Options) *Handler {
	m := bridge.Predictor(p)
	h := newHandler(m, opts)
	m.OnBatch(func(n int) { h.metrics.batches.Observe(float64(n)) })
	return h
}

// newHandler returns a Handler serving m.
func newHandler(m model, opts Options) *Handler {
	h := &Handler{model: m, opts: opts.withDefaults(), tok: m.Tokenizer(), metrics: newMetrics(m.Card), log: opts.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	if opts.APIKey != "" {
		h.key = []byte(opts.APIKey)
	}
	h.bytes = budget{resource: "bytes", limit: h.opts.MaxInflightBytes, share: h.opts.ClientShare, retryAfter: h.opts.RetryAfter}
	h.tokens = budget{resource: "tokens", limit: int64(h.opts.MaxInflightTokens), share: h.opts.ClientShare, retryAfter: h.opts.RetryAfter}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h.gather = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{h.log}})
	return h
}

// Describe sends the descriptions of the handler's metrics (prometheus.Collector).
func (h *Handler) Describe(ch chan<- *prometheus.Desc) { h.metrics.Describe(ch) }

// Collect sends the handler's metrics and the model card's counters at this moment (prometheus.Collector).
func (h *Handler) Collect(ch chan<- prometheus.Metric) { h.metrics.Collect(ch) }

// SetDraining marks the handler draining (or not): /readyz answers 503 while it is, so load balancers and
// Kubernetes stop sending new traffic; every endpoint keeps serving.
func (h *Handler) SetDraining(draining bool) { h.draining.Store(draining) }

// ready reports whether /readyz answers 200.
func (h *Handler) ready() bool { return !h.draining.Load() && !h.stopping.Load() }

// Stop makes the model endpoints answer 503 {"detail":"the server is stopping"} from now on, and /readyz 503;
// requests already inside run to the end. GET endpoints keep working.
func (h *Handler) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping.Swap(true) {
		return
	}
	h.idle = make(chan struct{})
	if h.inflight == 0 {
		close(h.idle)
	}
}

// Drain calls Stop and waits until every model request that was inside has been answered, or ctx ends.
func (h *Handler) Drain(ctx context.Context) error {
	h.Stop()
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enter admits a model request unless stopping.
func (h *Handler) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping.Load() {
		return false
	}
	h.inflight++
	h.metrics.inflight.Inc()
	return true
}

func (h *Handler) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inflight--
	h.metrics.inflight.Dec()
	if h.inflight == 0 && h.idle != nil {
		select {
		case <-h.idle:
		default:
			close(h.idle)
		}
	}
}

// route is one endpoint.
type route struct {
	path    string
	methods []string // GET routes also answer HEAD, as Starlette's do
	model   bool     // a model endpoint: 503 once stopping
	serve   func(h *Handler, w http.ResponseWriter, r *http.Request)
}

var routes = []route{
	{"/v1/systemone", []string{http.MethodPost}, true, (*Handler).serveSystemOne},
	{"/v1/systemone/permute", []string{http.MethodPost}, true, (*Handler).servePermute},
	{"/v1/systemone/separate", []string{http.MethodPost}, true, (*Handler).serveSeparate},
	{"/v1/models", []string{http.MethodGet, http.MethodHead}, false, (*Handler).serveModels},
	{"/healthz", []string{http.MethodGet, http.MethodHead}, false, (*Handler).serveHealth},
	{"/readyz", []string{http.MethodGet, http.MethodHead}, false, (*Handler).serveReady},
	{"/openapi.json", []string{http.MethodGet, http.MethodHead}, false, (*Handler).serveOpenAPI},
	{"/metrics", []string{http.MethodGet, http.MethodHead}, false, (*Handler).serveMetrics},
}

func findRoute(path string) *route {
	for i := range routes {
		if routes[i].path == path {
			return &routes[i]
		}
	}
	return nil
}

// metricPath is the path label of a request: the route's path, or "other" (unknown paths would make labels
// without bound).
func metricPath(path string) string {
	if rt := findRoute(path); rt != nil {
		return rt.path
	}
	return "other"
}

// ServeHTTP answers one request: request id, CORS, auth, routing, timing, metrics and a log record.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := &responseWriter{ResponseWriter: w, start: time.Now(), status: http.StatusOK}
	id := r.Header.Get(requestIDHeader)
	if id == "" || len(id) > maxRequestIDBytes {
		id = newRequestID() // a longer one is not echoed (nor logged): it would cost its size twice a request
	}
	rw.Header().Set(requestIDHeader, id)
	h.cors(rw, r)
	if h.opts.BodyTimeout > 0 && r.ContentLength != 0 {
		// Bounds a body no handler reads too, which the server discards after the response.
		http.NewResponseController(rw).SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	}
	if h.stopping.Load() {
		// Clients should not send more on this connection: it closes after this response.
		rw.Header().Set("Connection", "close")
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("kev: panic serving request", "request_id", id, "path", r.URL.Path, "panic", fmt.Sprint(v))
			if !rw.wrote {
				h.internalError(rw)
			}
		}
		d := time.Since(rw.start)
		h.metrics.observeRequest(metricPath(r.URL.Path), r.Method, rw.status, d.Seconds())
		h.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("request_id", id),
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", rw.status),
			slog.Float64("ms", float64(d.Microseconds())/1000), slog.Int64("bytes", rw.bytes))
	}()

	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		if !h.opts.AuthPreflight || h.authorized(r) {
			h.preflight(rw, r)
			return
		}
	}
	if !h.authorized(r) {
		rw.Header().Set("Www-Authenticate", "Bearer")
		h.detail(rw, http.StatusUnauthorized, "missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>")
		return
	}
	rt := findRoute(r.URL.Path)
	if rt == nil {
		h.notFound(rw, r)
		return
	}
	allowed := false
	for _, m := range rt.methods {
		allowed = allowed || m == r.Method
	}
	if !allowed {
		rw.Header().Set("Allow", strings.Join(rt.methods, ", "))
		h.detail(rw, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	if rt.model {
		if !h.enter() {
			h.retryAfter(rw, h.opts.RetryAfter)
			h.detail(rw, http.StatusServiceUnavailable, "the server is stopping")
			return
		}
		defer h.leave()
		t := &ticket{h: h, client: clientOf(r)}
		defer t.done()
		ctx := systemone.WithAdmitter(context.WithValue(r.Context(), ticketKey{}, t), t)
		r = r.WithContext(ctx)
	}
	rt.serve(h, rw, r)
}

// ticketKey keys a model request's *ticket in its context.
type ticketKey struct{}

// authorized reports whether r may pass the key check: always when no key is set or the path does not start
// with /v1; otherwise when its Authorization header is the scheme "Bearer", in any case, one space and the key
// (as FastAPI's HTTPBearer splits it).
func (h *Handler) authorized(r *http.Request) bool {
	if h.key == nil || !strings.HasPrefix(r.URL.Path, "/v1") {
		return true
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(cred), h.key) == 1
}

// notFound answers an unknown path: a 307 to the same path with the trailing slash toggled when that is a route
// (Starlette's redirect_slashes), else 404.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p != "/" {
		alt := p + "/"
		if strings.HasSuffix(p, "/") {
			alt = strings.TrimSuffix(p, "/")
		}
		if findRoute(alt) != nil {
			// A relative reference: the client's Host header is not copied into the answer.
			u := url.URL{Path: alt, RawQuery: r.URL.RawQuery}
			w.Header().Set("Location", u.String())
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return
		}
	}
	h.detail(w, http.StatusNotFound, "Not Found")
}

// The methods a CORS preflight is told are allowed: Starlette's list for allow_methods=["*"].
const corsMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"

// cors adds the simple-response CORS headers when the request has an Origin: any origin, exposing the request id
// and timing headers.
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	if r.Header.Get("Cookie") != "" {
		// A request with cookies must see its own origin, not "*" (Starlette does the same).
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
	} else {
		w.Header().Set("Access-Control-Allow-Origin", "*")
	}
	w.Header().Set("Access-Control-Expose-Headers", "x-typesafe-request-id, server-timing")
}

// preflight answers a CORS preflight: 200 "OK", any method, the requested headers, cached 10 minutes.
func (h *Handler) preflight(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Access-Control-Allow-Methods", corsMethods)
	hd.Set("Access-Control-Max-Age", "600")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		hd.Set("Access-Control-Allow-Headers", req)
	}
	hd.Del("Access-Control-Expose-Headers")
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Content-Length", "2")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "OK")
}

// writeJSON sends v as compact JSON with the given status.
func (h *Handler) writeJSON(w http.ResponseWriter, status int, v pyjson.Value) {
	b, err := pyjson.Compact(v)
	if err != nil {
		h.log.Error("kev: response not encodable", "err", err)
		h.internalError(w)
		return
	}
	h.writeBytes(w, status, "application/json", b)
}

func (h *Handler) writeBytes(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// detail sends {"detail": msg}.
func (h *Handler) detail(w http.ResponseWriter, status int, msg string) {
	h.writeJSON(w, status, pyjson.Object(pyjson.M("detail", pyjson.String(msg))))
}

func (h *Handler) internalError(w http.ResponseWriter) {
	h.writeBytes(w, http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("Internal Server Error"))
}

// errStopping is the error of a model call refused because the handler is stopping.
var errStopping = errors.New("kev: the server is stopping")

// fail answers err the way Kev's server does: 422 for a schema or admission error, 400 for a body Python could not
// read as text, 413 for an oversized body, 503 when stopping, else 500 with the error logged.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ve *systemone.ValidationError
	var pe *pyjson.ParseError
	var mbe *http.MaxBytesError
	var oe *systemone.OverloadError
	var cse *ClientShareError
	var bte *BodyTimeoutError
	switch {
	case errors.As(err, &ve):
		h.writeJSON(w, http.StatusUnprocessableEntity, ve.Detail())
	case errors.As(err, &pe):
		h.detail(w, http.StatusBadRequest, "There was an error parsing the body")
	case errors.As(err, &mbe):
		h.detail(w, http.StatusRequestEntityTooLarge, "request body is over the "+strconv.FormatInt(mbe.Limit, 10)+"-byte limit")
	case errors.As(err, &cse):
		h.retryAfter(w, cse.RetryAfter)
		if cse.Resource == "bytes" {
			w.Header().Set("Connection", "close") // the body is not read
		}
		h.detail(w, http.StatusTooManyRequests, cse.Error())
	case errors.As(err, &oe):
		h.retryAfter(w, oe.RetryAfter)
		if oe.Resource == "bytes" {
			w.Header().Set("Connection", "close") // the body is not read
		}
		h.detail(w, http.StatusServiceUnavailable, oe.Error())
	case errors.As(err, &bte):
		w.Header().Set("Connection", "close")
		h.detail(w, http.StatusRequestTimeout, bte.Error())
	case errors.Is(err, errStopping), errors.Is(err, kev.ErrClosed):
		h.retryAfter(w, h.opts.RetryAfter)
		h.detail(w, http.StatusServiceUnavailable, "the server is stopping")
	default:
		if msg, ok := systemone.AdmissionDetail(err); ok {
			h.detail(w, http.StatusUnprocessableEntity, msg)
			return
		}
		var de *systemone.DetailError
		if errors.As(err, &de) {
			h.detail(w, de.Status, de.Msg)
			return
		}
		if r.Context().Err() != nil {
			// The client is gone; whatever is written is not read.
			h.log.Info("kev: request cancelled", "path", r.URL.Path, "err", err)
			h.detail(w, 499, "client closed request")
			return
		}
		h.log.Error("kev: request failed", "path", r.URL.Path, "request_id", w.Header().Get(requestIDHeader), "err", err)
		h.internalError(w)
	}
}

// retryAfter sets Retry-After to d in whole seconds, at least one.
func (h *Handler) retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10))
}

// readBody reads the request body within the size limit and parses it as FastAPI does for a JSON body parameter:
// an empty body is null; a body whose Content-Type is not JSON stays raw text (which then fails validation); JSON
// syntax errors are json_invalid validation errors; bytes that are not text are a *pyjson.ParseError.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (pyjson.Value, error) {
	v, _, err := h.readBodyRaw(w, r)
	return v, err
}

// readBodyRaw is readBody, returning the body's bytes too (nil when it was not read as JSON).
func (h *Handler) readBodyRaw(w http.ResponseWriter, r *http.Request) (pyjson.Value, []byte, error) {
	data, err := h.bodyBytes(w, r)
	if err != nil {
		return pyjson.Value{}, nil, err
	}
	if len(data) == 0 {
		return pyjson.Null(), nil, nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !jsonContentType(ct) {
		return pyjson.String(string(data)), nil, nil
	}
	v, err := pyjson.Parse(data)
	if err != nil {
		var se *pyjson.SyntaxError
		if errors.As(err, &se) {
			return pyjson.Value{}, nil, &systemone.ValidationError{Errors: []systemone.FieldError{{
				Type:  "json_invalid",
				Loc:   []any{se.Pos},
				Msg:   "JSON decode error",
				Input: pyjson.Object(),
				Ctx:   pyjson.Object(pyjson.M("error", pyjson.String(se.Msg))),
			}}}
		}
		return pyjson.Value{}, nil, err
	}
	return v, data, nil
}

// bodyBytes reads the request body within the size limit, the body timeout, the minimum body rate and the bound
// on body bytes in flight. The bytes are reserved as they arrive, not as declared, so that slow bodies cannot hold
// the bound with what they have not sent; a body that declares more than the bound leaves is refused (an
// *systemone.OverloadError) before it is read, when nothing else could make room for it.
func (h *Handler) bodyBytes(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > h.opts.MaxBodyBytes {
		return nil, &http.MaxBytesError{Limit: h.opts.MaxBodyBytes}
	}
	t, _ := r.Context().Value(ticketKey{}).(*ticket)
	if t == nil {
		t = &ticket{h: h, client: clientOf(r)}
		defer t.done()
	}
	if r.ContentLength > 0 {
		// Refuse at once what cannot fit even if it arrived now (what is in flight already holds too much).
		if err := t.h.bytes.check(r.ContentLength, t.bytes); err != nil {
			return nil, err
		}
	}
	// The deadlines also bound what the server discards of a body left unread (an overloaded or timed-out one).
	rc := http.NewResponseController(w)
	pr := &pacedReader{r: r.Body, t: t, rc: rc, start: time.Now(), timeout: h.opts.BodyTimeout,
		rate: h.opts.MinBodyRate, grace: h.opts.BodyRateGrace}
	var data []byte
	var err error
	if r.ContentLength >= 0 {
		data, err = readN(pr, r.ContentLength)
		if err == nil {
			var one [1]byte
			r.Body.Read(one[:]) // reaches EOF, from when the server watches for the client going away
		}
	} else {
		data, err = io.ReadAll(http.MaxBytesReader(w, io.NopCloser(pr), h.opts.MaxBodyBytes))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline stays in the past: the server reads nothing more from this connection and closes it.
		return nil, &BodyTimeoutError{Timeout: h.opts.BodyTimeout, Slow: pr.slow}
	}
	if pr.deadline && err == nil {
		// The deadline is for the body only: the model may take longer, and the server's watch for the client
		// going away must not time out under it.
		rc.SetReadDeadline(time.Time{})
	}
	return data, err
}

// readN reads exactly n bytes of r, its buffer growing with what arrives (doubling up to n), so that a declared
// length costs memory only as its bytes come.
func readN(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, min(n, 64<<10))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*int64(cap(buf))))
			copy(grown, buf)
			buf = grown
		}
		k, err := r.Read(buf[len(buf):min(int64(cap(buf)), n)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF && int64(len(buf)) < n {
				err = io.ErrUnexpectedEOF
			}
			if int64(len(buf)) == n && err == io.EOF {
				break
			}
			return nil, err
		}
	}
	return buf, nil
}

// pacedReader reads a body under its deadlines, reserving the bytes in flight as they arrive: before each read the
// connection's read deadline is the earlier of the body timeout and the moment the body falls behind the minimum
// rate (grace + received/rate after its start).
type pacedReader struct {
	r        io.Reader
	t        *ticket
	rc       *http.ResponseController
	start    time.Time
	timeout  time.Duration // <= 0: none
	rate     int64         // bytes a second; <= 0: none
	grace    time.Duration
	received int64
	deadline bool // a deadline was set
	slow     bool // the last deadline set was the rate's
}

func (p *pacedReader) Read(b []byte) (int, error) {
	var d time.Time
	if p.timeout > 0 {
		d = p.start.Add(p.timeout)
	}
	p.slow = false
	if p.rate > 0 {
		pace := p.start.Add(p.grace + time.Duration(float64(p.received)/float64(p.rate)*float64(time.Second)))
		if d.IsZero() || pace.Before(d) {
			d, p.slow = pace, true
		}
	}
	if !d.IsZero() && p.rc.SetReadDeadline(d) == nil {
		p.deadline = true
	}
	n, err := p.r.Read(b)
	if n > 0 {
		p.received += int64(n)
		if aerr := p.t.takeBytes(int64(n)); aerr != nil {
			return n, aerr
		}
	}
	return n, err
}

// BodyTimeoutError reports a request body not received within Options.BodyTimeout, or arriving slower than
// Options.MinBodyRate (HTTP 408).
type BodyTimeoutError struct {
	Timeout time.Duration
	Slow    bool // cut by the minimum rate, not the timeout
}

// Error says how long the server waited, or that the body was too slow.
func (e *BodyTimeoutError) Error() string {
	if e.Slow {
		return "request body arriving too slowly"
	}
	return "request body not received within " + e.Timeout.String()
}

// jsonContentType reports whether FastAPI reads a body of this Content-Type as JSON: application/json or
// application/*+json (an unparsable type reads as text/plain, as Python's email parser has it).
func jsonContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// decodeSystemOne reads and validates a SystemOneRequest body.
func (h *Handler) decodeSystemOne(w http.ResponseWriter, r *http.Request) (*systemone.Request, error) {
	v, raw, err := h.readBodyRaw(w, r)
	if err != nil {
		return nil, err
	}
	if v.IsNull() {
		return nil, &systemone.ValidationError{Errors: []systemone.FieldError{{Type: "missing", Msg: "Field required", Input: v}}}
	}
	req, err := systemone.RequestFromValue(v)
	if err != nil {
		return nil, err
	}
	if err := systemone.LoneSurrogateIDs(raw, req); err != nil {
		return nil, err
	}
	return req, nil
}

func (h *Handler) do(ctx context.Context, req *systemone.Request) (*systemone.Response, error) {
	resp, err := h.model.Do(ctx, req)
	if err == nil {
		h.metrics.model.Observe(resp.LatencyMS / 1000)
	}
	return resp, err
}

func (h *Handler) serveSystemOne(w http.ResponseWriter, r *http.Request) {
	req, err := h.decodeSystemOne(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp, err := h.do(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, http.StatusOK, resp.Value())
}

func (h *Handler) serveSeparate(w http.ResponseWriter, r *http.Request) {
	req, err := h.decodeSystemOne(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp, err := systemone.Separate(r.Context(), h.do, req, h.tok)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, http.StatusOK, resp.Value())
}

func (h *Handler) servePermute(w http.ResponseWriter, r *http.Request) {
	v, raw, err := h.readBodyRaw(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pr, err := systemone.PermuteRequestFromValue(v)
	if err == nil {
		err = systemone.LoneSurrogateIDs(raw, pr.Request, "request")
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out, err := systemone.Permute(r.Context(), h.do, pr)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, http.StatusOK, out.Value())
}

func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	card := h.model.Card()
	h.writeJSON(w, http.StatusOK, card.ModelsValue())
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	h.gather.ServeHTTP(w, r)
}

// serveHealth answers the liveness probe: the process is up and serving HTTP.
func (h *Handler) serveHealth(w http.ResponseWriter, r *http.Request) {
	h.writeJSON(w, http.StatusOK, pyjson.Object(pyjson.M("status", pyjson.String("ok"))))
}

// serveReady answers the readiness probe: 200 once the predictor is loaded (a Handler exists only then), 503 while
// draining or stopped.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	if !h.ready() {
		h.writeJSON(w, http.StatusServiceUnavailable, pyjson.Object(pyjson.M("status", pyjson.String("draining"))))
		return
	}
	h.writeJSON(w, http.StatusOK, pyjson.Object(pyjson.M("status", pyjson.String("ready"))))
}

func (h *Handler) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h.writeBytes(w, http.StatusOK, "application/json", []byte(openAPI))
}

// newRequestID returns a fresh request id: a random UUID4 as 32 lowercase hex digits, no dashes.
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// responseWriter records the status and size, and stamps Server-Timing when the header goes out.
type responseWriter struct {
	http.ResponseWriter
	start  time.Time
	status int
	bytes  int64
	wrote  bool
}

// WriteHeader stamps Server-Timing and sends the header once.
func (w *responseWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.status = code
	ms := float64(time.Since(w.start).Nanoseconds()) / 1e6
	w.Header().Set(serverTimingHeader, "app;dur="+strconv.FormatFloat(ms, 'f', 1, 64))
	w.ResponseWriter.WriteHeader(code)
}

// Write sends body bytes, the header first if it has not gone out.
func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func statusText(code int) string { return strconv.Itoa(code) }

func fmtArgs(v []any) string { return fmt.Sprint(v...) }
