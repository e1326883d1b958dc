// Package loadtest drives a running System One server with concurrent clients and reports what Kev's HTTP bench
// reports: per concurrency level the requests, errors, throughput, client-side p50/p99 latency, the server's own
// time (Server-Timing) and the model time (latency_ms); protocol checks (401 without the key, 422 for an invalid
// body); and whether every answer to the same body was the same.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultLevels are the concurrent clients of each level when Config.Levels is empty.
var DefaultLevels = []int{1, 32, 64}

// Config describes one load test.
type Config struct {
	URL    string   // the server's root, e.g. http://127.0.0.1:8008
	APIKey string   // sent as "Authorization: Bearer <APIKey>" when not empty; enables the 401 check
	Bodies [][]byte // System One request bodies, cycled; client i starts at body i

	Levels    []int         // concurrent clients per level; nil: DefaultLevels
	Duration  time.Duration // how long each level sends requests; 0: 2 s
	Requests  int           // when > 0, a level also stops after this many requests
	PerClient int           // when > 0, each client of a level stops after this many requests
	Warmup    int           // requests sent before the first level, not measured

	Client *http.Client // nil: a client with keep-alive connections enough for the largest level
}

// Level is one concurrency level's result. Latencies are in milliseconds.
type Level struct {
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	RPS         float64 `json:"rps"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	ProcessP50  float64 `json:"process_p50"`           // Server-Timing app;dur
	ModelP50    float64 `json:"model_p50"`             // the response's latency_ms
	FirstError  string  `json:"first_error,omitempty"` // what the first failed request got, when one failed
}

// Protocol holds the status codes the protocol checks got; 0 for a check not made.
type Protocol struct {
	Unauthorized int  `json:"unauthorized"` // a request without the key (only when Config.APIKey is set): want 401
	Invalid      int  `json:"invalid"`      // a body with no questions: want 422
	RequestID    bool `json:"request_id"`   // every response carried X-Typesafe-Request-Id
	OK           bool `json:"ok"`           // every check made got what it wants
}

// Report is a load test's result, in the shape Kev's HTTP bench writes.
type Report struct {
	URL          string   `json:"url"`
	Levels       []Level  `json:"levels"`
	Protocol     Protocol `json:"protocol"`
	AnswersEqual bool     `json:"answers_equal"` // every response to a body had the same answers
	Mismatches   int      `json:"mismatches"`    // responses whose answers differed from the first to that body
}

// JSON returns the report indented, with a final newline.
func (r *Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// sample is one request's outcome.
type sample struct {
	ok              bool
	wall            time.Duration
	process, model  float64 // ms; NaN when missing
	body            int
	answers         string
	hasID           bool
	status          int
	transportFailed bool
	err             string // why the request failed: the transport error, or the status and the body's start
}

// Run runs the warm-up, the protocol checks and every level in turn. It fails only for a bad Config or when ctx
// ends; errors of single requests are counted in the levels.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.URL == "" || len(cfg.Bodies) == 0 {
		return nil, errors.New("loadtest: Config needs URL and at least one body")
	}
	levels := cfg.Levels
	if len(levels) == 0 {
		levels = DefaultLevels
	}
	for _, n := range levels {
		if n < 1 {
			return nil, fmt.Errorf("loadtest: level of %d clients", n)
		}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 2 * time.Second
	}
	client := cfg.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = slices.Max(levels)
		client = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	url := strings.TrimSuffix(cfg.URL, "/") + "/v1/systemone"
	rep := &Report{URL: cfg.URL, AnswersEqual: true, Protocol: Protocol{RequestID: true}}
	first := make([]string, len(cfg.Bodies))
	var mu sync.Mutex
	record := func(s sample) {
		mu.Lock()
		defer mu.Unlock()
		if !s.hasID && !s.transportFailed {
			rep.Protocol.RequestID = false
		}
		if !s.ok {
			return
		}
		switch {
		case first[s.body] == "":
			first[s.body] = s.answers
		case first[s.body] != s.answers:
			rep.Mismatches++
			rep.AnswersEqual = false
		}
	}

	for i := range cfg.Warmup {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		record(send(ctx, client, url, cfg.APIKey, cfg.Bodies, i%len(cfg.Bodies)))
	}

	ok := true
	if cfg.APIKey != "" {
		s := send(ctx, client, url, "", cfg.Bodies, 0)
		record(s)
		rep.Protocol.Unauthorized = s.status
		ok = ok && s.status == http.StatusUnauthorized
	}
	inv := send(ctx, client, url, cfg.APIKey, [][]byte{[]byte(`{"state":"x","questions":{}}`)}, 0)
	inv.body = -1
	if inv.transportFailed {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("loadtest: no System One server answers at %s: %s", cfg.URL, inv.err)
	}
	rep.Protocol.Invalid = inv.status
	ok = ok && inv.status == http.StatusUnprocessableEntity
	if !inv.hasID {
		rep.Protocol.RequestID = false
	}

	for _, n := range levels {
		lv, err := runLevel(ctx, client, url, cfg, n, record)
		if err != nil {
			return nil, err
		}
		rep.Levels = append(rep.Levels, lv)
	}
	rep.Protocol.OK = ok && rep.Protocol.RequestID
	return rep, nil
}

// runLevel runs n clients until the level's time or request budget is spent.
func runLevel(ctx context.Context, client *http.Client, url string, cfg Config, n int, record func(sample)) (Level, error) {
	lctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		mu      sync.Mutex
		samples []sample
		sent    int
		wg      sync.WaitGroup
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if lctx.Err() != nil || (cfg.Requests > 0 && sent >= cfg.Requests) {
			return false
		}
		sent++
		return true
	}
	start := time.Now()
	for c := range n {
		wg.Go(func() {
			for i := c; (cfg.PerClient <= 0 || i-c < cfg.PerClient) && take(); i++ {
				// A request that is sent runs to its end: the level's deadline stops new ones only.
				s := send(context.WithoutCancel(lctx), client, url, cfg.APIKey, cfg.Bodies, i%len(cfg.Bodies))
				record(s)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Level{}, err
	}
	lv := Level{Concurrency: n, Requests: len(samples)}
	var wall, process, model []float64
	for _, s := range samples {
		if !s.ok {
			if lv.Errors == 0 {
				lv.FirstError = s.err
			}
			lv.Errors++
			continue
		}
		wall = append(wall, float64(s.wall.Nanoseconds())/1e6)
		if !math.IsNaN(s.process) {
			process = append(process, s.process)
		}
		if !math.IsNaN(s.model) {
			model = append(model, s.model)
		}
	}
	if elapsed > 0 {
		lv.RPS = round(float64(lv.Requests-lv.Errors)/elapsed.Seconds(), 2)
	}
	lv.P50MS = round(Percentile(wall, 50), 2)
	lv.P99MS = round(Percentile(wall, 99), 2)
	lv.ProcessP50 = round(Percentile(process, 50), 2)
	lv.ModelP50 = round(Percentile(model, 50), 2)
	return lv, nil
}

// send posts body i and reads what the report needs from the response.
func send(ctx context.Context, client *http.Client, url, key string, bodies [][]byte, i int) sample {
	s := sample{body: i, process: math.NaN(), model: math.NaN()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i]))
	if err != nil {
		s.transportFailed, s.err = true, err.Error()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		s.transportFailed, s.err = true, err.Error()
		return s
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.wall = time.Since(t0)
	s.status = resp.StatusCode
	s.hasID = resp.Header.Get("X-Typesafe-Request-Id") != ""
	s.process = ServerTiming(resp.Header.Get("Server-Timing"))
	switch {
	case err != nil:
		s.err = fmt.Sprintf("HTTP %d, reading the body: %v", resp.StatusCode, err)
		return s
	case resp.StatusCode != http.StatusOK:
		s.err = fmt.Sprintf("HTTP %d", resp.StatusCode)
		if body := clip(data, 200); body != "" {
			s.err += ": " + body
		}
		return s
	}
	var body struct {
		Answers   json.RawMessage `json:"answers"`
		LatencyMS *float64        `json:"latency_ms"`
	}
	if json.Unmarshal(data, &body) != nil || body.Answers == nil {
		s.err = fmt.Sprintf("HTTP 200 without answers: %s", clip(data, 200))
		return s
	}
	s.ok = true
	s.answers = string(body.Answers)
	if body.LatencyMS != nil {
		s.model = *body.LatencyMS
	}
	return s
}

// clip returns data as text, cut to at most n bytes (at a rune boundary) with "..." when longer.
func clip(data []byte, n int) string {
	s := strings.ToValidUTF8(strings.TrimSpace(string(data)), "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// ServerTiming returns the milliseconds of the "app" metric of a Server-Timing header ("app;dur=12.3"), or NaN.
func ServerTiming(h string) float64 {
	for _, m := range strings.Split(h, ",") {
		parts := strings.Split(strings.TrimSpace(m), ";")
		if parts[0] != "app" {
			continue
		}
		for _, p := range parts[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					return f
				}
			}
		}
	}
	return math.NaN()
}

// Percentile returns the q-th percentile (0..100) of xs with linear interpolation between closest ranks (numpy's
// default), or 0 for no values.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
