package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serve serves the handler on ln with the limits of its Options until ctx ends, then drains the way load balancers
// need: /readyz and every new model request answer 503 (with Connection: close, so keep-alive clients reconnect
// elsewhere) at once, while the listener stays open for DrainGrace and the requests in flight finish; then the
// listener closes, idle connections are closed, and Serve waits up to DrainTimeout for the requests still in
// flight. It returns nil after a clean drain, or the error that ended serving or draining.
func (h *Handler) Serve(ctx context.Context, ln net.Listener) error {
	o := h.opts
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	if o.MaxConns > 0 || o.FirstByteTimeout > 0 {
		n := o.MaxConns
		if n <= 0 {
			n = math.MaxInt32
		}
		ll := newLimitListener(ln, n, o.FirstByteTimeout)
		h.conns = ll
		srv.ConnState = ll.connState
		ln = ll
	}
	if h.key == nil {
		if loopback(ln.Addr()) {
			h.log.Warn("kev: no API key: any web page opened in a browser on this machine can call the model "+
				"(CORS allows every origin); set an API key (KEV_API_KEY) to stop that", "addr", ln.Addr().String())
		} else {
			h.log.Warn("kev: NO API KEY and listening beyond loopback: any client on the network can call the model, "+
				"and any web page a user opens can too (CORS allows every origin); set an API key (KEV_API_KEY) or "+
				"listen on 127.0.0.1", "addr", ln.Addr().String())
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	h.Stop()
	h.log.Info("kev: stopping: /readyz and new model requests answer 503 while requests in flight finish",
		"grace", o.DrainGrace.String(), "in_flight", h.inFlight())
	if o.DrainGrace > 0 {
		t := time.NewTimer(o.DrainGrace)
		select {
		case <-t.C:
		case err := <-served:
			t.Stop()
			return err
		}
	}
	h.log.Info("kev: closing the listener", "in_flight", h.inFlight())
	sctx, cancel := context.WithTimeout(context.Background(), o.DrainTimeout)
	defer cancel()
	if o.DrainTimeout <= 0 {
		sctx = context.Background()
	}
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// loopback reports whether a listener's address is a loopback one (127.0.0.0/8, ::1).
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// inFlight returns the model requests inside the handler.
func (h *Handler) inFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflight
}

// limitListener holds at most n connections open at once. When all n are taken and a client connects, it closes
// the connection that has been waiting longest for a request (one that has sent nothing yet; failing that, an idle
// keep-alive one) to make room, so that idle sockets cannot hold the cap; only when every connection is in a request does the
// new one wait for a slot. A new connection must send its first byte within firstByte.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	once      sync.Once
	done      chan struct{}
	firstByte time.Duration // 0: none

	mu      sync.Mutex
	idle    map[*limitConn]idleSince // connections between requests (new or keep-alive)
	evicted int64                    // connections closed to make room
}

func newLimitListener(ln net.Listener, n int, firstByte time.Duration) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), firstByte: firstByte,
		idle: map[*limitConn]idleSince{}}
}

// Accept waits for a connection, then for a free slot, closing the longest-waiting idle connection (see evict) if
// there is none.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for free := false; !free; {
		select {
		case l.slots <- struct{}{}:
			free = true
			continue
		default:
		}
		if l.evict() {
			continue
		}
		// Nothing to close yet: wait for a slot, and look again as connections age.
		t := time.NewTimer(evictAge / 4)
		select {
		case l.slots <- struct{}{}:
			free = true
		case <-t.C:
		case <-l.done:
			t.Stop()
			c.Close()
			return nil, net.ErrClosed
		}
		t.Stop()
	}
	lc := &limitConn{Conn: c, l: l}

	if l.firstByte > 0 {
		lc.first = time.Now().Add(l.firstByte)
		c.SetReadDeadline(lc.first)
	}
	l.setIdle(lc, true, false)
	return lc, nil
}

// idleSince is when a connection began waiting for a request, and whether it has sent one before.
type idleSince struct {
	at        time.Time
	keepAlive bool
}

// before orders eviction: connections that never sent a request first (a keep-alive client's next request may
// already be on its way), then the longest waiting.
func (a idleSince) before(b idleSince) bool {
	if a.keepAlive != b.keepAlive {
		return !a.keepAlive
	}
	return a.at.Before(b.at)
}

// evictAge is how long a connection must have waited for a request before it may be closed to make room: one
// whose request is on its way (its bytes not read yet) is not closed under it.
const evictAge = 200 * time.Millisecond

// evict closes the connection that has waited longest for a request, at least evictAge, preferring ones that never
// sent one, and reports whether it closed one.
func (l *limitListener) evict() bool {
	l.mu.Lock()
	var oldest *limitConn
	var since idleSince
	cutoff := time.Now().Add(-evictAge)
	for c, t := range l.idle {
		if t.at.After(cutoff) {
			continue
		}
		if oldest == nil || t.before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
		l.evicted++
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	oldest.Close()
	return true
}

// evictedCount returns how many connections were closed to make room.
func (l *limitListener) evictedCount() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

// setIdle records whether c is between requests; a closed connection is never recorded again (the server's hooks
// may run after an eviction closed it).
func (l *limitListener) setIdle(c *limitConn, idle, keepAlive bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if idle && !c.closed {
		if _, ok := l.idle[c]; !ok {
			l.idle[c] = idleSince{at: time.Now(), keepAlive: keepAlive}
		}
		return
	}
	delete(l.idle, c)
}

// connState is the server's ConnState hook: it tracks which connections are between requests.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	switch st {
	case http.StateNew: // recorded by Accept, with its time
	case http.StateIdle:
		l.setIdle(lc, true, true)
	default:
		l.setIdle(lc, false, false)
	}
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when closed, and holds its read deadline to the first-byte deadline until a byte
// has arrived.
type limitConn struct {
	net.Conn
	l      *limitListener
	once   sync.Once
	closed bool // guarded by l.mu

	mu    sync.Mutex
	first time.Time // the first byte's deadline; zero once a byte has arrived (or with none)
	want  time.Time // the read deadline the server set
}

// Read reads, lifting the first-byte deadline once a byte has arrived.
func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if !c.first.IsZero() {
			c.first = time.Time{}
			c.Conn.SetReadDeadline(c.want)
		}
		c.mu.Unlock()
	}
	return n, err
}

// SetReadDeadline sets the read deadline, never later than the first byte's while none has arrived.
func (c *limitConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	if !c.first.IsZero() && (t.IsZero() || c.first.Before(t)) {
		t = c.first
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines, the read one as SetReadDeadline does.
func (c *limitConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// Close closes the connection and frees its slot.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
