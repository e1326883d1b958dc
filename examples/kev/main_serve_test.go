package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kevgo/kev/server"
)

func TestServeConfig(t *testing.T) {
	setInteractive(t, false) // the defaults of a server that no terminal runs
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, err := serveConfigFrom(nil, env())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:8008" || cfg.run != "" || cfg.hopts.APIKey != "" ||
		cfg.opts.PrefixCache != 0 || cfg.opts.TruncateStates || cfg.opts.DateFacts || cfg.drain != time.Minute {
		t.Errorf("defaults: %+v", cfg)
	}

	cfg, err = serveConfigFrom(nil, env("KEV_ADDR", "0.0.0.0:9000", "KEV_RUN", "org/kev@v1", "KEV_API_KEY", "k",
		"KEV_PREFIX_CACHE", "0", "KEV_PREFIX_MIN_TOKENS", "16", "KEV_PREFIX_MAX_TOKENS", "4096", "KEV_DATE_FACTS", "1",
		"KEV_TRUNCATE_STATES", "1", "KEV_TEMPERATURE", "1.5", "KEV_LORA_SCALE", "0.5", "KEV_DTYPE", "fp8"))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.opts
	if cfg.addr != "0.0.0.0:9000" || cfg.run != "org/kev@v1" || cfg.hopts.APIKey != "k" || o.PrefixCache != -1 ||
		o.PrefixMinTokens != 16 || o.PrefixMaxTokens != 4096 || !o.DateFacts || !o.TruncateStates ||
		o.Temperature != 1.5 || o.LoRAScale != 0.5 || o.DType != "fp8" {
		t.Errorf("from the environment: %+v", cfg)
	}

	cfg, err = serveConfigFrom([]string{"-addr", "127.0.0.1:0", "-checkpoint", "/x/kev", "-base", "/x/base", "-dtype", "bf16", "-drain", "5s"},
		env("KEV_ADDR", "0.0.0.0:9000", "KEV_RUN", "org/kev", "KEV_PREFIX_CACHE", "8", "KEV_DTYPE", "fp8"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:0" || cfg.run != "/x/kev" || cfg.opts.Base != "/x/base" || cfg.opts.DType != "bf16" ||
		cfg.drain != 5*time.Second || cfg.opts.PrefixCache != 8 {
		t.Errorf("flags over the environment: %+v", cfg)
	}

	for _, bad := range [][]string{
		{"KEV_PREFIX_CACHE", "four"}, {"KEV_PREFIX_MAX_TOKENS", "-1"}, {"KEV_DATE_FACTS", "maybe"},
		{"KEV_TEMPERATURE", "hot"}, {"KEV_LORA_SCALE", "-2"},
	} {
		_, err := serveConfigFrom(nil, env(bad...))
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
	cfg, err = serveConfigFrom([]string{"-body-timeout", "5s", "-max-conns", "-1", "-drain-grace", "0s"},
		env("KEV_BODY_TIMEOUT", "9s", "KEV_IDLE_TIMEOUT", "2m", "KEV_HEADER_TIMEOUT", "4s", "KEV_MAX_HEADER_BYTES", "8192",
			"KEV_MAX_CONNS", "64", "KEV_MAX_INFLIGHT_BYTES", "1048576", "KEV_MAX_INFLIGHT_TOKENS", "1000", "KEV_DRAIN_GRACE", "30s"))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.BodyTimeout != 5*time.Second || h.IdleTimeout != 2*time.Minute || h.ReadHeaderTimeout != 4*time.Second ||
		h.MaxHeaderBytes != 8192 || h.MaxConns != -1 || h.MaxInflightBytes != 1<<20 || h.MaxInflightTokens != 1000 ||
		h.DrainGrace != -1 || h.DrainTimeout != time.Minute {
		t.Errorf("server limits from flags and the environment: %+v", h)
	}
	cfg, err = serveConfigFrom(nil, env())
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.BodyTimeout != server.DefaultBodyTimeout || h.IdleTimeout != server.DefaultIdleTimeout ||
		h.MaxConns != server.DefaultMaxConns || h.MaxInflightBytes != server.DefaultMaxInflightBytes ||
		h.DrainGrace != server.DefaultDrainGrace {
		t.Errorf("server limits by default: %+v", h)
	}
	for _, bad := range [][]string{{"KEV_BODY_TIMEOUT", "soon"}, {"KEV_MAX_CONNS", "many"}, {"KEV_FIRST_BYTE_TIMEOUT", "5"},
		{"KEV_MIN_BODY_RATE", "fast"}, {"KEV_BODY_RATE_GRACE", "later"}, {"KEV_CLIENT_SHARE", "1"}, {"KEV_CLIENT_SHARE", "-0.5"},
		{"KEV_CLIENT_SHARE", "half"}} {
		if _, err := serveConfigFrom(nil, env(bad...)); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
	for _, share := range []string{"1", "1.5", "-0.1"} {
		var ue *usageError
		if _, err := serveConfigFrom([]string{"-client-share", share}, env()); !errors.As(err, &ue) || !strings.Contains(err.Error(), "-client-share") {
			t.Errorf("-client-share %s: %v", share, err)
		}
	}
	if _, err := serveConfigFrom([]string{"extra"}, env()); err == nil {
		t.Error("a stray argument was accepted")
	}
}

// TestServeConnectionFlags checks the flags of the server's remaining limits — a new connection's first byte, the
// minimum body rate and its grace, one client's share — and their variables: the defaults are server.Options',
// the flags reach the Options over the environment, and 0 turns a limit off (the minimum rate's grace: the rate
// applies from a body's first byte; the share is off by default).
func TestServeConnectionFlags(t *testing.T) {
	setInteractive(t, false)
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, err := serveConfigFrom(nil, env())
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.FirstByteTimeout != server.DefaultFirstByteTimeout || h.MinBodyRate != server.DefaultMinBodyRate ||
		h.BodyRateGrace != server.DefaultBodyRateGrace || h.ClientShare != 0 {
		t.Errorf("defaults: first byte %v, body rate %d after %v, client share %v", h.FirstByteTimeout, h.MinBodyRate, h.BodyRateGrace, h.ClientShare)
	}
	cfg, err = serveConfigFrom(nil, env("KEV_FIRST_BYTE_TIMEOUT", "2s", "KEV_MIN_BODY_RATE", "1024",
		"KEV_BODY_RATE_GRACE", "3s", "KEV_CLIENT_SHARE", "0.25"))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.FirstByteTimeout != 2*time.Second || h.MinBodyRate != 1024 || h.BodyRateGrace != 3*time.Second || h.ClientShare != 0.25 {
		t.Errorf("from the environment: first byte %v, body rate %d after %v, client share %v", h.FirstByteTimeout, h.MinBodyRate, h.BodyRateGrace, h.ClientShare)
	}
	cfg, err = serveConfigFrom([]string{"-first-byte-timeout", "1500ms", "-min-body-rate", "4096", "-body-rate-grace", "10s", "-client-share", "0.5"},
		env("KEV_FIRST_BYTE_TIMEOUT", "2s", "KEV_MIN_BODY_RATE", "1024", "KEV_BODY_RATE_GRACE", "3s", "KEV_CLIENT_SHARE", "0.25"))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.FirstByteTimeout != 1500*time.Millisecond || h.MinBodyRate != 4096 || h.BodyRateGrace != 10*time.Second || h.ClientShare != 0.5 {
		t.Errorf("flags over the environment: first byte %v, body rate %d after %v, client share %v", h.FirstByteTimeout, h.MinBodyRate, h.BodyRateGrace, h.ClientShare)
	}
	cfg, err = serveConfigFrom([]string{"-first-byte-timeout", "0", "-min-body-rate", "0", "-body-rate-grace", "0", "-client-share", "0"},
		env("KEV_CLIENT_SHARE", "0.25"))
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.hopts; h.FirstByteTimeout >= 0 || h.MinBodyRate >= 0 || h.BodyRateGrace >= 0 || h.ClientShare != 0 {
		t.Errorf("0 for none: first byte %v, body rate %d after %v, client share %v; want negative (none) and 0",
			h.FirstByteTimeout, h.MinBodyRate, h.BodyRateGrace, h.ClientShare)
	}
	code, _, help := runCmd(t, "", "serve", "-h")
	for _, s := range []string{"-first-byte-timeout duration", "(default 5s)", "-min-body-rate int", "(default 16384)",
		"-body-rate-grace duration", "-client-share float"} {
		if code != 0 || !strings.Contains(help, s) {
			t.Errorf("serve -h (exit %d) lacks %q", code, s)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the server's log writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs start in the background on the bundled checkpoint and returns the address once it listens.
func startServe(t *testing.T, start func() error) (string, <-chan error, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	stderr = logs
	ready := make(chan string, 1)
	serveReady = func(addr string) { ready <- addr }
	t.Cleanup(func() { stderr, serveReady = os.Stderr, nil })
	done := make(chan error, 1)
	go func() { done <- start() }()
	select {
	case addr := <-ready:
		return addr, done, logs
	case err := <-done:
		t.Fatalf("serve returned before listening: %v\n%s", err, logs)
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not start")
	}
	return "", nil, nil
}

func postJSON(c *http.Client, url, body, key string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

var (
	inFlight  = regexp.MustCompile(`(?m)^kev_http_requests_in_flight (\d+)$`)
	received1 = regexp.MustCompile(`(?m)^kev_http_requests_total\{method="POST",path="/v1/systemone/permute",status="\d+"\} (\d+)$`)
)

// TestServeShutdownDrains serves the bundled checkpoint, starts requests, shuts down while they are inside, and
// checks every one of them is answered; the listener takes nothing after.
func TestServeShutdownDrains(t *testing.T) {
	cfg, err := serveConfigFrom([]string{"-addr", "127.0.0.1:0", "-drain-grace", "200ms"}, func(k string) string {
		if k == "KEV_API_KEY" {
			return "secret"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done, logs := startServe(t, func() error { return serve(ctx, cfg) })
	url := "http://" + addr
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer c.CloseIdleConnections()

	req := `{"state":"My running shoes arrived in the wrong size.","model":"jev-latest","questions":{"department":{"type":"choice","instructions":"Which team should handle this?","criteria":{"returns":"Exchanges, refunds","shipping":"Delivery","billing":"Charges"}}}}`
	if code, body, err := postJSON(c, url+"/v1/systemone", req, "secret"); err != nil || code != 200 || !strings.HasPrefix(body, `{"model":"jev-latest","answers":{"department":{"type":"choice","choice":"`) {
		t.Fatalf("%d %s %v", code, body, err)
	}
	if code, _, _ := postJSON(c, url+"/v1/systemone", req, ""); code != 401 {
		t.Errorf("no key: %d", code)
	}

	const n = 12
	type result struct {
		code int
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			body := fmt.Sprintf(`{"request":%s,"question":"department","n_perm":8,"seed":%d}`, req, i)
			code, _, err := postJSON(c, url+"/v1/systemone/permute", body, "secret")
			results <- result{code, err}
		}()
	}
	// Wait until the server has received every request (inside or answered), then stop as a signal would. A
	// request still on its way could meet a closing keep-alive connection, which no server can answer.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		received := 0
		for _, m := range received1.FindAllSubmatch(b, -1) {
			k, _ := strconv.Atoi(string(m[1]))
			received += k
		}
		inside := 0
		if m := inFlight.FindSubmatch(b); m != nil {
			inside, _ = strconv.Atoi(string(m[1]))
		}
		if received+inside >= n {
			t.Logf("stopping with %d of %d requests inside", inside, n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the requests never all arrived")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	for range n {
		if r := <-results; r.err != nil || r.code != 200 {
			t.Errorf("request lost: %d %v", r.code, r.err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
	if _, _, err := postJSON(&http.Client{}, url+"/v1/systemone", req, "secret"); err == nil {
		t.Error("the server still answers after it stopped")
	}
	for _, s := range []string{"kev: serving", "KEV_API_KEY required", "kev: stopping", "kev: stopped"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, logs)
		}
	}
}

// TestServeSignal runs the command itself and stops it with SIGTERM.
func TestServeSignal(t *testing.T) {
	addr, done, logs := startServe(t, func() error {
		return serveCommand([]string{"-addr", "127.0.0.1:0", "-drain", "10s", "-drain-grace", "200ms"})
	})
	resp, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), `{"models":[{"name":"kev-latest","description":"Kev pointer head on `) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\n%s", err, logs)
		}
	case <-time.After(time.Minute):
		t.Fatal("SIGTERM did not stop the server")
	}
	if !strings.Contains(logs.String(), "kev: stopped") {
		t.Errorf("log:\n%s", logs)
	}
}

func TestServeBadAddress(t *testing.T) {
	stderr = io.Discard
	t.Cleanup(func() { stderr = os.Stderr })
	cfg, err := serveConfigFrom([]string{"-addr", "256.0.0.1:" + strconv.Itoa(1)}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := serve(context.Background(), cfg); err == nil {
		t.Fatal("listening on a bad address succeeded")
	}
}

// setInteractive makes kev serve see a terminal, or not, until the test ends.
func setInteractive(t *testing.T, on bool) {
	old := interactive
	interactive = func() bool { return on }
	t.Cleanup(func() { interactive = old })
}

// TestServeInteractiveGrace checks the drain grace of kev serve run in a terminal: none by default (an idle server
// stops at Ctrl-C at once), what KEV_DRAIN_GRACE or -drain-grace sets when set.
func TestServeInteractiveGrace(t *testing.T) {
	setInteractive(t, true)
	for _, c := range []struct {
		args []string
		env  string
		want time.Duration
	}{
		{nil, "", -1},
		{nil, "3s", 3 * time.Second},
		{[]string{"-drain-grace", "2s"}, "", 2 * time.Second},
		{[]string{"-drain-grace", "5s"}, "", 5 * time.Second}, // the default's value, set on purpose
	} {
		cfg, err := serveConfigFrom(c.args, func(k string) string {
			if k == "KEV_DRAIN_GRACE" {
				return c.env
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.hopts.DrainGrace != c.want {
			t.Errorf("%v, KEV_DRAIN_GRACE=%q: drain grace %v, want %v", c.args, c.env, cfg.hopts.DrainGrace, c.want)
		}
	}
}

// TestWatchSignals checks that the first stop signal stops serving gracefully and the second forces the stop.
func TestWatchSignals(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	var cancelled, forced atomic.Int32
	done := make(chan struct{})
	go func() {
		watchSignals(sigs, func() { cancelled.Add(1) }, func() { forced.Add(1) })
		close(done)
	}()
	sigs <- os.Interrupt
	sigs <- os.Interrupt
	<-done
	if cancelled.Load() != 1 || forced.Load() != 1 {
		t.Errorf("after two signals: cancelled %d, forced %d; want 1, 1", cancelled.Load(), forced.Load())
	}
	sigs = make(chan os.Signal, 1)
	cancelled.Store(0)
	forced.Store(0)
	sigs <- os.Interrupt
	close(sigs) // serving ended before a second signal
	watchSignals(sigs, func() { cancelled.Add(1) }, func() { forced.Add(1) })
	if cancelled.Load() != 1 || forced.Load() != 0 {
		t.Errorf("after one signal: cancelled %d, forced %d; want 1, 0", cancelled.Load(), forced.Load())
	}
}
