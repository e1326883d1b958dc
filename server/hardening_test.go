package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
)

// startServe runs a handler for m on a loopback listener with h.Serve until cancel; done receives what Serve
// returned. Unless opts say otherwise, there is no drain grace.
func startServe(t *testing.T, m model, opts Options) (h *Handler, addr string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.DrainGrace == 0 {
		opts.DrainGrace = -1
	}
	h = newHandler(m, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		ch <- h.Serve(ctx, ln)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	})
	return h, ln.Addr().String(), cancel, ch
}

// rawConn is a client connection that writes requests by hand.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// response reads one response within d, its body whole.
func (c *rawConn) response(d time.Duration) (*http.Response, string, error) {
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// closedWithin reports whether the server closes the connection within d.
func (c *rawConn) closedWithin(d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.br.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// trickle writes a space to c every d until it fails, 1000 at most.
func trickle(c net.Conn, d time.Duration) {
	for range 1000 {
		if _, err := c.Write([]byte(" ")); err != nil {
			return
		}
		time.Sleep(d)
	}
}

const noulBody = `{"state":"s","questions":{"q":{"type":"noul"}}}`

// stateBody is a request whose state is n bytes.
func stateBody(n int) string {
	return `{"state":"` + strings.Repeat("x", n) + `","questions":{"q":{"type":"noul"}}}`
}

// TestHardeningBearerSchemeCase (finding 8): "Authorization: bearer <key>" got 401; the scheme is
// case-insensitive (RFC 7235), as FastAPI's HTTPBearer has it. The key stays exact, after exactly one space.
func TestHardeningBearerSchemeCase(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1, card: testCard}, Options{APIKey: "secret"})
	for _, c := range []struct {
		authz  string
		status int
	}{
		{"Bearer secret", 200}, {"bearer secret", 200}, {"BEARER secret", 200}, {"bEaReR secret", 200},
		{"Bearer  secret", 401}, {"bearer Secret", 401}, {"Bearersecret", 401}, {"Basic secret", 401},
		{"bearer", 401}, {"bearer ", 401}, {"secret", 401}, {"Token secret", 401},
	} {
		if r := post(t, srv.URL+"/v1/systemone", noulBody, "Authorization", c.authz); r.status != c.status {
			t.Errorf("Authorization %q: %d %s, want %d", c.authz, r.status, r.body, c.status)
		}
	}
}

// TestHardeningAdmissionBytes (finding 4): bodies in flight are bounded. A request whose declared body would go
// past MaxInflightBytes gets 503 with Retry-After and Connection: close without sending its body, a chunked one as
// its bytes arrive; a small one still fits; once the big one inside is answered, the same request is served.
func TestHardeningAdmissionBytes(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 4), block: make(chan struct{}), blockLarge: 1000}
	h, addr, _, _ := startServe(t, m, Options{MaxBodyBytes: 1 << 20, MaxInflightBytes: 1 << 20, RetryAfter: 2 * time.Second})
	url := "http://" + addr
	first := make(chan reply, 1)
	go func() { first <- post(t, url+"/v1/systemone", stateBody(700_000)) }()
	<-m.started
	held := int64(len(stateBody(700_000)))

	c := dial(t, addr)
	fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: 700000\r\n\r\n")
	resp, body, err := c.response(5 * time.Second) // no body sent: the answer does not wait for it
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"detail":"the server is busy: requests in flight hold %d bytes of its 1048576-byte limit and this one needs 700000; retry later"}`, held)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || !resp.Close || body != want {
		t.Errorf("declared body over the bound: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	req, _ := http.NewRequest("POST", url+"/v1/systemone", io.MultiReader(strings.NewReader(stateBody(700_000))))
	req.Header.Set("Content-Type", "application/json")
	cresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := io.ReadAll(cresp.Body)
	cresp.Body.Close()
	if cresp.StatusCode != 503 || cresp.Header.Get("Retry-After") != "2" || req.ContentLength != 0 {
		t.Errorf("chunked body over the bound: %d %s", cresp.StatusCode, cb)
	}
	if r := post(t, url+"/v1/systemone", noulBody); r.status != 200 {
		t.Errorf("small request beside it: %d %s", r.status, r.body)
	}
	if got := h.bytes.inUse(); got != held {
		t.Errorf("bytes in flight %d with the first request inside, want %d", got, held)
	}
	close(m.block)
	if r := <-first; r.status != 200 {
		t.Errorf("first request: %d %s", r.status, r.body)
	}
	if r := post(t, url+"/v1/systemone", stateBody(700_000)); r.status != 200 {
		t.Errorf("after the first was answered: %d %s", r.status, r.body)
	}
	if got := h.bytes.inUse(); got != 0 {
		t.Errorf("%d bytes still held with nothing in flight", got)
	}
}

// TestHardeningAdmissionTokens (finding 4): encoded tokens in flight are bounded: past MaxInflightTokens a request
// gets 503 with Retry-After (its body was read, so the connection stays open); a request larger than the bound
// runs when it is alone.
func TestHardeningAdmissionTokens(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 4), block: make(chan struct{}), blockLarge: 500}
	srv, h := serve(t, m, Options{MaxInflightTokens: 1000})
	first := make(chan reply, 1)
	go func() { first <- post(t, srv.URL+"/v1/systemone", stateBody(600)) }()
	<-m.started
	r := post(t, srv.URL+"/v1/systemone", stateBody(499))
	want := `{"detail":"the server is busy: requests in flight hold 601 tokens of its 1000-token limit and this one needs 500; retry later"}`
	if r.status != 503 || r.header.Get("Retry-After") != "1" || r.close || r.body != want {
		t.Errorf("over the token bound: %d %v %s", r.status, r.header, r.body)
	}
	if r := post(t, srv.URL+"/v1/systemone", stateBody(300)); r.status != 200 {
		t.Errorf("within the bound: %d %s", r.status, r.body)
	}
	close(m.block)
	if r := <-first; r.status != 200 {
		t.Errorf("first: %d %s", r.status, r.body)
	}
	if r := post(t, srv.URL+"/v1/systemone", stateBody(5000)); r.status != 200 {
		t.Errorf("alone and over the bound: %d %s", r.status, r.body)
	}
	if got := h.tokens.inUse(); got != 0 {
		t.Errorf("%d tokens still held", got)
	}
}

// admitRecorder is an Admitter that records what it is asked and refuses past a limit.
type admitRecorder struct {
	mu       sync.Mutex
	asked    []int
	released int
	refuse   bool
}

func (a *admitRecorder) Admit(n int) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, n)
	if a.refuse {
		return nil, &systemone.OverloadError{Resource: "tokens", Want: int64(n), Limit: 1}
	}
	return func() { a.mu.Lock(); a.released++; a.mu.Unlock() }, nil
}

// TestHardeningPredictorAdmitsTokens: the predictor asks the request's Admitter for its encoded tokens (the usage's
// input_tokens) before queueing, releases them once answered, and queues nothing it refuses.
func TestHardeningPredictorAdmitsTokens(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	m := bridge.Predictor(p)
	req, err := systemone.DecodeRequest([]byte(`{"state":"My shoes came in the wrong size.","questions":{"q":{"type":"choice","criteria":{"a":"returns","b":"billing"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := &admitRecorder{}
	resp, err := m.Do(systemone.WithAdmitter(context.Background(), a), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.asked) != 1 || a.asked[0] != resp.Usage.InputTokens || a.released != 1 {
		t.Errorf("asked %v, released %d, input tokens %d", a.asked, a.released, resp.Usage.InputTokens)
	}
	batches := p.Stats().Batches.Requests
	a = &admitRecorder{refuse: true}
	_, err = m.Do(systemone.WithAdmitter(context.Background(), a), req)
	var oe *systemone.OverloadError
	if !errors.As(err, &oe) || p.Stats().Batches.Requests != batches {
		t.Errorf("refused: %v, %d requests run (was %d)", err, p.Stats().Batches.Requests, batches)
	}
}

// TestHardeningOverLimitStateMessage (finding 4): a state far over the limit, tokenised only to the limit and
// counted beyond, still gets Kev's exact 422 with its full token count, through the real predictor and tokenizer.
func TestHardeningOverLimitStateMessage(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{})
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		fmt.Fprintf(&sb, "Line %d: the order <|box_end|> shipped late, naïve café — %x.\n", i, i*7919)
	}
	state := sb.String()
	n := len(systemone.UserTokens(bridge.Predictor(p).Tokenizer(), state)) + 1
	if n <= systemone.MaxStateTokens {
		t.Fatalf("state of %d tokens is not over the limit", n)
	}
	body := fmt.Sprintf(`{"state":%q,"questions":{"q":{"type":"noul"}}}`, state)
	r := post(t, srv.URL+"/v1/systemone", body)
	want := `{"detail":"state is ` + commaInt(n) + ` tokens, over the 65,536-token limit (the <state> token included): shorten the document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only its first 65,536 tokens (responses then say truncated: true)"}`
	if r.status != 422 || r.body != want {
		t.Errorf("%d %s\nwant %s", r.status, r.body, want)
	}
}

// commaInt formats n with comma thousands separators.
func commaInt(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestHardeningSlowBody (finding 6): a body trickled at one byte every 50 ms is cut at the body timeout with 408
// and the connection closed (it used to stay open as long as the client kept trickling).
func TestHardeningSlowBody(t *testing.T) {
	_, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{BodyTimeout: 400 * time.Millisecond, MinBodyRate: -1})
	c := dial(t, addr)
	fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	go trickle(c, 50*time.Millisecond)
	resp, body, err := c.response(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 408 || !resp.Close || body != `{"detail":"request body not received within 400ms"}` {
		t.Errorf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if !c.closedWithin(5 * time.Second) {
		t.Error("the connection stays open")
	}

	// A body no handler reads (an unknown path) is discarded under the same deadline.
	c = dial(t, addr)
	fmt.Fprintf(c, "POST /nowhere HTTP/1.1\r\nHost: kev\r\nContent-Length: 1000\r\n\r\n")
	go trickle(c, 50*time.Millisecond)
	if resp, _, err := c.response(5 * time.Second); err != nil || resp.StatusCode != 404 {
		t.Fatalf("%v %v", resp, err)
	}
	if !c.closedWithin(5 * time.Second) {
		t.Error("a slow body on an unknown path keeps its connection open")
	}
}

// TestHardeningSlowBodiesReserveWhatArrived (slow bodies): four connections declaring bodies that together fill
// the in-flight bound and sending one byte each hold four bytes of it, not the bound (four 32 MiB bodies sent a
// byte every 10 s used to hold all 128 MiB: every other request got 503 for a minute); other requests are served
// beside them.
func TestHardeningSlowBodiesReserveWhatArrived(t *testing.T) {
	h, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{MaxBodyBytes: 1 << 20, MaxInflightBytes: 1 << 20,
		BodyRateGrace: time.Minute})
	for range 4 {
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 256<<10)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.bytes.inUse() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := h.bytes.inUse(); got != 4 {
		t.Errorf("four slow bodies hold %d bytes in flight, want the 4 that arrived", got)
	}
	for i := range 10 {
		if r := post(t, "http://"+addr+"/v1/systemone", stateBody(100_000+i)); r.status != 200 {
			t.Errorf("request %d beside the slow bodies: %d %s", i, r.status, r.body)
		}
	}
}

// TestHardeningMinBodyRate (slow bodies): a body behind the minimum rate once its grace has passed gets 408 and its
// connection is closed, long before the body timeout; its bytes go back.
func TestHardeningMinBodyRate(t *testing.T) {
	h, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{MinBodyRate: 1000, BodyRateGrace: 200 * time.Millisecond,
		BodyTimeout: time.Hour})
	c := dial(t, addr)
	fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	resp, body, err := c.response(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 408 || !resp.Close || body != `{"detail":"request body arriving too slowly"}` {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if !c.closedWithin(5 * time.Second) {
		t.Error("the connection stays open")
	}
	if got := h.bytes.inUse(); got != 0 {
		t.Errorf("%d bytes still held", got)
	}
	// A body ahead of the rate is read whole, in pieces.
	c = dial(t, addr)
	b := noulBody + strings.Repeat(" ", 400)
	fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(b))
	go func() {
		for i := 0; i < len(b); i += 100 {
			c.Write([]byte(b[i:min(i+100, len(b))]))
			time.Sleep(time.Millisecond)
		}
	}()
	if resp, body, err := c.response(30 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a body in pieces: %v %v %s", resp, err, body)
	}
}

// TestHardeningFirstByte (connections before auth): a connection that sends nothing is closed at the first-byte
// timeout; one whose first byte came in time has the rest of its header under the header timeout.
func TestHardeningFirstByte(t *testing.T) {
	_, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{FirstByteTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 20 * time.Second})
	silent := dial(t, addr)
	if !silent.closedWithin(10 * time.Second) {
		t.Error("a connection that sends nothing stays open")
	}
	c := dial(t, addr)
	fmt.Fprintf(c, "G")
	time.Sleep(400 * time.Millisecond) // past the first-byte timeout, inside the header's
	fmt.Fprintf(c, "ET /healthz HTTP/1.1\r\nHost: kev\r\n\r\n")
	if resp, _, err := c.response(10 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a header completed after its first byte: %v %v", resp, err)
	}
}

// TestHardeningConnectionFlood (connections before auth): with every connection slot held by sockets that sent
// nothing (5,000 such used to make a real request wait 120 s), an authenticated request is served at once: the
// longest-silent connection is closed to make room. Slots held by slow headers are freed by the header timeout.
func TestHardeningConnectionFlood(t *testing.T) {
	h, addr, _, _ := startServe(t, &fakeModel{latency: 1, card: testCard}, Options{APIKey: "k", MaxConns: 8,
		FirstByteTimeout: time.Minute, ReadHeaderTimeout: 500 * time.Millisecond})
	var idle []*rawConn
	for range 40 {
		idle = append(idle, dial(t, addr))
	}
	r := post(t, "http://"+addr+"/v1/systemone", noulBody, "Authorization", "Bearer k")
	if r.status != 200 {
		t.Fatalf("authenticated request beside 40 silent connections: %d %s", r.status, r.body)
	}
	closed := 0
	for _, c := range idle {
		if c.closedWithin(50 * time.Millisecond) {
			closed++
		}
	}
	// Closed to make room, or at the header timeout (which bounds a new connection's first byte too).
	if closed < 40-8+1 || h.conns.evictedCount() == 0 {
		t.Errorf("%d of 40 silent connections closed (%d to make room), want at least %d", closed, h.conns.evictedCount(), 40-8+1)
	}
	// Slow headers: every slot inside a request header; the header timeout frees them. (A fresh client: the
	// keep-alive connection of the request above may be closed to make room, as at its idle timeout.)
	for range 8 {
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\n")
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if r := httpCall(t, fresh, "POST", "http://"+addr+"/v1/systemone", noulBody, "Authorization", "Bearer k"); r.status != 200 {
		t.Fatalf("authenticated request beside 8 slow headers: %d %s", r.status, r.body)
	}
}

// TestHardeningSlowBodyThenSlowModel: the body timeout does not cut a request whose model time is longer.
func TestHardeningSlowBodyThenSlowModel(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 1), block: make(chan struct{})}
	_, addr, _, _ := startServe(t, m, Options{BodyTimeout: 200 * time.Millisecond})
	res := make(chan reply, 1)
	go func() { res <- post(t, "http://"+addr+"/v1/systemone", noulBody) }()
	<-m.started
	time.Sleep(500 * time.Millisecond)
	close(m.block)
	if r := <-res; r.status != 200 {
		t.Errorf("%d %s", r.status, r.body)
	}
}

// TestHardeningIdleTimeout (finding 6): an idle keep-alive connection is closed at the idle timeout (they used to
// stay forever).
func TestHardeningIdleTimeout(t *testing.T) {
	_, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{IdleTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: kev\r\n\r\n")
	if resp, _, err := c.response(5 * time.Second); err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("%v %v", resp, err)
	}
	if !c.closedWithin(10 * time.Second) {
		t.Fatal("the idle connection stays open")
	}
}

// TestHardeningMaxHeaderBytes (finding 6): a header over MaxHeaderBytes gets 431.
func TestHardeningMaxHeaderBytes(t *testing.T) {
	_, addr, _, _ := startServe(t, &fakeModel{latency: 1}, Options{MaxHeaderBytes: 4096})
	c := dial(t, addr)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: kev\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 16<<10))
	resp, _, err := c.response(5 * time.Second) // the server may reset the connection after its answer
	if resp == nil || resp.StatusCode != 431 {
		t.Fatalf("%v %v", resp, err)
	}
	c = dial(t, addr)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: kev\r\nX-Small: %s\r\n\r\n", strings.Repeat("a", 2<<10))
	if resp, _, err := c.response(5 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
}

// TestHardeningMaxConns (finding 6): past MaxConns open connections, a new one closes one that is idle and is
// served; with every connection inside a request, it waits until one closes (1,000 idle keep-alive connections
// used to hold 1,012 descriptors).
func TestHardeningMaxConns(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 4), block: make(chan struct{}), blockLarge: 1000}
	_, addr, _, _ := startServe(t, m, Options{MaxConns: 2})
	var open []*rawConn
	for range 2 {
		c := dial(t, addr)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: kev\r\n\r\n")
		if resp, _, err := c.response(5 * time.Second); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		open = append(open, c)
	}
	third := dial(t, addr)
	fmt.Fprintf(third, "GET /healthz HTTP/1.1\r\nHost: kev\r\n\r\n")
	if resp, _, err := third.response(5 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a third connection beside two idle ones: %v %v", resp, err)
	}
	// One of the two idle connections was closed to make room (the one the server saw go idle first).
	if c0, c1 := open[0].closedWithin(time.Second), open[1].closedWithin(time.Second); c0 == c1 {
		t.Errorf("idle connections closed: %v, %v; want one of them", c0, c1)
	}
	third.Close()
	open[1].Close()
	// Two connections inside requests: a third waits for one to close.
	body := stateBody(2000)
	var busy []*rawConn
	for range 2 {
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		busy = append(busy, c)
	}
	<-m.started
	<-m.started
	waiting := dial(t, addr)
	fmt.Fprintf(waiting, "GET /healthz HTTP/1.1\r\nHost: kev\r\n\r\n")
	if resp, _, err := waiting.response(300 * time.Millisecond); err == nil {
		t.Fatalf("a third connection was served beside two requests: %d", resp.StatusCode)
	}
	close(m.block)
	for _, c := range busy {
		if resp, _, err := c.response(5 * time.Second); err != nil || resp.StatusCode != 200 {
			t.Fatalf("busy request: %v %v", resp, err)
		}
	}
	busy[0].Close()
	waiting.br.Reset(waiting.Conn) // the timed-out read left nothing behind
	if resp, _, err := waiting.response(5 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after one closed: %v %v", resp, err)
	}
}

// TestHardeningDrain (finding 7): on ctx's end (SIGTERM in kev serve) /readyz fails at once; for the grace the
// listener stays open and answers 503 with Connection: close, keep-alive clients included (no broken pipes);
// requests in flight finish, even past the grace; then the listener closes.
func TestHardeningDrain(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 16), block: make(chan struct{}), blockLarge: 10}
	const grace = 600 * time.Millisecond
	h, addr, cancel, done := startServe(t, m, Options{DrainGrace: grace})
	url := "http://" + addr
	keepAlive := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer keepAlive.CloseIdleConnections()
	if r := httpCall(t, keepAlive, "POST", url+"/v1/systemone", noulBody); r.status != 200 || r.close {
		t.Fatalf("before: %d %v", r.status, r.close)
	}

	const n = 8
	results := make(chan reply, n)
	for i := range n {
		go func() { results <- post(t, url+"/v1/systemone", stateBody(100+i)) }()
	}
	for range n {
		<-m.started
	}
	start := time.Now()
	cancel()
	deadline := time.Now().Add(2 * time.Second)
	for h.ready() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if r := httpCall(t, nil, "GET", url+"/readyz", ""); r.status != 503 || !r.close {
		t.Errorf("readyz while draining: %d close %v", r.status, r.close)
	}
	// The keep-alive client's idle connection answers 503 and closes; nothing breaks.
	var reused bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/systemone", strings.NewReader(noulBody))
	resp, err := keepAlive.Do(req)
	if err != nil {
		t.Fatalf("keep-alive client while draining: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !resp.Close || string(b) != `{"detail":"the server is stopping"}` || !reused {
		t.Errorf("keep-alive client while draining: %d close %v reused %v %s", resp.StatusCode, resp.Close, reused, b)
	}
	if r := post(t, url+"/v1/systemone", noulBody); r.status != 503 || !r.close {
		t.Errorf("new client while draining: %d close %v", r.status, r.close)
	}
	// The listener closes after the grace (waited for, not timed: a busy machine may be late).
	closedAt := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(closedAt) {
			t.Fatal("the listener still accepts long after the grace")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(start) < grace {
		t.Error("the listener closed before the grace")
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned with requests in flight: %v", err)
	default:
	}
	close(m.block)
	for range n {
		if r := <-results; r.status != 200 {
			t.Errorf("in-flight request: %d %s", r.status, r.body)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// TestHardeningSmallerItems: the "server is stopping" 503 says when to retry; a request id over 128 bytes is not
// echoed; ids "\ud800" and "\udc00" (both U+FFFD once parsed) get a 422 instead of collapsing into one answer;
// permute's seed 1e400 is a 422, not a 500; the slash redirect does not copy the client's Host.
func TestHardeningSmallerItems(t *testing.T) {
	srv, h := serve(t, &fakeModel{latency: 1, card: testCard}, Options{RetryAfter: 3 * time.Second})
	long := strings.Repeat("r", 64<<10)
	r := post(t, srv.URL+"/v1/systemone", noulBody, requestIDHeader, long)
	if got := r.header.Get(requestIDHeader); r.status != 200 || len(got) != 32 {
		t.Errorf("64 KiB request id: %d, echoed %d bytes", r.status, len(got))
	}
	if r := post(t, srv.URL+"/v1/systemone", noulBody, requestIDHeader, "abc-123"); r.header.Get(requestIDHeader) != "abc-123" {
		t.Errorf("short request id not echoed: %q", r.header.Get(requestIDHeader))
	}
	for _, path := range []string{"/v1/systemone", "/v1/systemone/separate"} {
		r := post(t, srv.URL+path, `{"state":"s","questions":{"\ud800":{"type":"noul"},"\udc00":{"type":"noul"}}}`)
		if r.status != 422 || !strings.Contains(r.body, "lone UTF-16 surrogate") {
			t.Errorf("%s, lone surrogate ids: %d %s", path, r.status, r.body)
		}
	}
	r = post(t, srv.URL+"/v1/systemone/permute", `{"request":{"state":"s","questions":{"\ud800":{"type":"choice","criteria":{"a":null,"b":null}}}},"question":"\ud800","n_perm":2}`)
	if r.status != 422 || !strings.Contains(r.body, `"loc":["body","request","questions","`) {
		t.Errorf("permute, lone surrogate id: %d %s", r.status, r.body)
	}
	r = post(t, srv.URL+"/v1/systemone/permute", `{"request":`+permuteRequest+`,"question":"q","n_perm":2,"seed":1e400}`)
	if r.status != 422 || r.body != `{"detail":[{"type":"finite_number","loc":["body","seed"],"msg":"Input should be a finite number","input":"inf"}]}` {
		t.Errorf("seed 1e400: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/openapi.json/?x=1", nil)
	req.Host = "evil.example"
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 307 || loc != "/openapi.json?x=1" {
		t.Errorf("redirect: %d to %q", resp.StatusCode, loc)
	}
	h.Stop()
	r = post(t, srv.URL+"/v1/systemone", noulBody)
	if r.status != 503 || r.header.Get("Retry-After") != "3" || r.body != `{"detail":"the server is stopping"}` {
		t.Errorf("stopping: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

// TestHardeningNoKeyWarning: with no API key, Serve says at start-up that any web page (and beyond loopback, any
// client) can call the model; with a key it says nothing of the kind.
func TestHardeningNoKeyWarning(t *testing.T) {
	for _, key := range []string{"", "k"} {
		var buf syncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		_, _, cancel, done := startServe(t, &fakeModel{latency: 1}, Options{APIKey: key, Logger: log})
		cancel()
		<-done
		warned := strings.Contains(buf.String(), "no API key: any web page")
		if warned != (key == "") {
			t.Errorf("key %q: warned %v: %s", key, warned, buf.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// TestHardeningBoundsThroughPredictor: the render budget, the id bound and the shared separate path hold through
// the real predictor and tokenizer: a 206 KB render bomb and a 1 MB question id get their 422s, and separate's
// merged answers are each question's answer alone, byte for byte.
func TestHardeningBoundsThroughPredictor(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{})
	bomb := strings.Repeat(`{"a":`, 990) + "[" + strings.TrimSuffix(strings.Repeat("0,", 100_000), ",") + "]" + strings.Repeat("}", 990)
	r := post(t, srv.URL+"/v1/systemone", `{"state":`+bomb+`,"questions":{"q":{"type":"noul"}}}`)
	if want := `{"detail":"state renders to more than 8,388,608 bytes, over the 65,536-token limit (the <state> token included): shorten the document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only its first 65,536 tokens (responses then say truncated: true)"}`; r.status != 422 || r.body != want {
		t.Errorf("render bomb: %d %s", r.status, r.body)
	}
	r = post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"`+strings.Repeat("i", 1<<20)+`":{"type":"noul"}}}`)
	if want := `{"detail":"question 0 has an id of 1,048,576 bytes, over this server's limit of 4,096 bytes"}`; r.status != 422 || r.body != want {
		t.Errorf("long id: %d %s", r.status, r.body)
	}
	const state = `"My order arrived late and the box was open; I want a refund."`
	var qs []string
	for i := range 12 {
		qs = append(qs, fmt.Sprintf(`"q%d":{"type":"choice","instructions":"Route %d","criteria":{"returns":"Exchanges","shipping":"Delivery","billing":null}}`, i, i))
	}
	sep := post(t, srv.URL+"/v1/systemone/separate", `{"state":`+state+`,"questions":{`+strings.Join(qs, ",")+`}}`)
	if sep.status != 200 {
		t.Fatalf("separate: %d %s", sep.status, sep.body)
	}
	for i, q := range qs {
		one := post(t, srv.URL+"/v1/systemone", `{"state":`+state+`,"questions":{`+q+`}}`)
		answer := one.body[strings.Index(one.body, `"answers":{`)+len(`"answers":{`) : strings.Index(one.body, `},"usage"`)]
		if !strings.Contains(sep.body, answer) {
			t.Errorf("question %d: separate's answer differs from its own: %s", i, answer)
		}
	}
}

// TestHardeningClientShare: with ClientShare, one client's requests hold at most that share of a bound (past it:
// 429 with Retry-After), so another client finds the rest free; a client holding nothing may always send one
// request; without a share, nothing changes.
func TestHardeningClientShare(t *testing.T) {
	b := budget{resource: "tokens", limit: 1000, share: 0.5, retryAfter: time.Second}
	if err := b.acquire(600, 0, "a"); err != nil { // over its share, but it held nothing
		t.Fatal(err)
	}
	err := b.acquire(100, 0, "a")
	var ce *ClientShareError
	if !errors.As(err, &ce) || ce.Held != 600 || ce.Share != 500 {
		t.Fatalf("a second request of the client over its share: %v", err)
	}
	if err := b.acquire(400, 0, "b"); err != nil {
		t.Fatalf("another client: %v", err)
	}
	b.release(600, "a")
	if err := b.acquire(100, 0, "a"); err != nil {
		t.Fatalf("after its first was answered: %v", err)
	}
	if b.inUse() != 500 || len(b.byClient) != 2 {
		t.Errorf("in use %d by %v", b.inUse(), b.byClient)
	}

	// Through HTTP, from one address: the second request over the share gets 429.
	m := &fakeModel{latency: 1, started: make(chan struct{}, 4), block: make(chan struct{}), blockLarge: 500}
	srv, _ := serve(t, m, Options{MaxInflightTokens: 1000, ClientShare: 0.5, RetryAfter: 2 * time.Second})
	first := make(chan reply, 1)
	go func() { first <- post(t, srv.URL+"/v1/systemone", stateBody(600)) }()
	<-m.started
	r := post(t, srv.URL+"/v1/systemone", stateBody(300))
	want := `{"detail":"too many requests: this client's requests in flight hold 601 tokens of its 500-token share and this one needs 301; retry later"}`
	if r.status != 429 || r.header.Get("Retry-After") != "2" || r.body != want {
		t.Errorf("over the client's share: %d %v %s", r.status, r.header, r.body)
	}
	close(m.block)
	if r := <-first; r.status != 200 {
		t.Errorf("first: %d %s", r.status, r.body)
	}
	if r := post(t, srv.URL+"/v1/systemone", stateBody(300)); r.status != 200 {
		t.Errorf("after the first was answered: %d %s", r.status, r.body)
	}
}
