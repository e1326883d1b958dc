package server

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kevgo/kev/internal/systemone"
)

// Defaults of the admission bounds (Options.MaxInflightBytes, MaxInflightTokens, RetryAfter).
const (
	// DefaultMaxInflightBytes bounds the request bodies being read and answered at once: four bodies at the
	// default 32 MiB limit, thousands of ordinary ones. The memory they take is a few times their size (the body,
	// its parsed JSON and the rendered state), under 1 GB at this bound.
	DefaultMaxInflightBytes = 128 << 20
	// DefaultMaxInflightTokens bounds the encoded tokens of the requests queued for or inside the model at once:
	// 64 requests at the 65,536-token state limit.
	DefaultMaxInflightTokens = 64 * 65536
	// DefaultRetryAfter is the Retry-After of a 503 for a server over an admission bound.
	DefaultRetryAfter = time.Second
)

// budget is a bound on a resource that requests in flight hold (body bytes or tokens).
type budget struct {
	resource   string  // "bytes" or "tokens"
	limit      int64   // <= 0: none
	share      float64 // in (0, 1): the most of limit one client may hold (Options.ClientShare); else none
	retryAfter time.Duration

	mu       sync.Mutex
	used     int64
	byClient map[string]int64 // with a share: what each client holds
}

// ClientShareError refuses a request from a client that already holds its share of a bound (Options.ClientShare):
// HTTP 429 with Retry-After, while other clients keep the rest.
type ClientShareError struct {
	Resource   string // "bytes" or "tokens"
	Want       int64
	Held       int64 // what this client's requests in flight hold
	Share      int64 // the most one client may hold
	RetryAfter time.Duration
}

// Error says what the client holds and its share.
func (e *ClientShareError) Error() string {
	return "too many requests: this client's requests in flight hold " + strconv.FormatInt(e.Held, 10) + " " +
		e.Resource + " of its " + strconv.FormatInt(e.Share, 10) + "-" + strings.TrimSuffix(e.Resource, "s") +
		" share and this one needs " + strconv.FormatInt(e.Want, 10) + "; retry later"
}

// acquire takes n of the budget for a request of client that already holds own of it. It fails when the requests
// in flight would hold more than the limit, unless no other request holds any (a request larger than the whole
// budget then runs alone rather than never); with a share, also when the client's requests would hold more than
// its share, unless they hold none.
func (b *budget) acquire(n, own int64, client string) error {
	if b.limit <= 0 || n <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit && b.used > own {
		return &systemone.OverloadError{Resource: b.resource, Want: n, InFlight: b.used, Limit: b.limit, RetryAfter: b.retryAfter}
	}
	if b.share > 0 && b.share < 1 {
		held, share := b.byClient[client], int64(b.share*float64(b.limit))
		if held > 0 && held+n > share {
			return &ClientShareError{Resource: b.resource, Want: n, Held: held, Share: share, RetryAfter: b.retryAfter}
		}
		if b.byClient == nil {
			b.byClient = map[string]int64{}
		}
		b.byClient[client] += n
	}
	b.used += n
	return nil
}

// check reports whether n more could be taken now for a request that holds own, without taking them.
func (b *budget) check(n, own int64) error {
	if b.limit <= 0 || n <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit && b.used > own {
		return &systemone.OverloadError{Resource: b.resource, Want: n, InFlight: b.used, Limit: b.limit, RetryAfter: b.retryAfter}
	}
	return nil
}

// release gives back n that client held.
func (b *budget) release(n int64, client string) {
	if b.limit <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.byClient != nil {
		if b.byClient[client] -= n; b.byClient[client] <= 0 {
			delete(b.byClient, client)
		}
	}
	b.mu.Unlock()
}

// inUse returns what the requests in flight hold.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ticket is one HTTP request's share of the budgets; it admits the request's model calls (systemone.Admitter).
type ticket struct {
	h      *Handler
	client string // the client's address, without its port

	mu     sync.Mutex
	bytes  int64
	tokens int64
}

// takeBytes reserves n more body bytes.
func (t *ticket) takeBytes(n int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.h.bytes.acquire(n, t.bytes, t.client); err != nil {
		return err
	}
	t.bytes += n
	return nil
}

// Admit reserves the tokens of one encoded model call until release (systemone.Admitter).
func (t *ticket) Admit(tokens int) (func(), error) {
	n := int64(tokens)
	t.mu.Lock()
	err := t.h.tokens.acquire(n, t.tokens, t.client)
	if err == nil {
		t.tokens += n
	}
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.tokens -= n
			t.mu.Unlock()
			t.h.tokens.release(n, t.client)
		})
	}, nil
}

// done gives back the request's body bytes (its tokens go back as each model call ends).
func (t *ticket) done() {
	t.mu.Lock()
	n := t.bytes
	t.bytes = 0
	t.mu.Unlock()
	t.h.bytes.release(n, t.client)
}

// clientOf returns the client a request counts against for Options.ClientShare: its remote address without the
// port (behind a proxy, the proxy's: set no share there, or let the proxy keep shares).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
