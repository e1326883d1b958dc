package server

import (
	"context"
	"errors"
	"log/slog"
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
	if o.MaxConns > 0 {
		ln = newLimitListener(ln, o.MaxConns)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
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

// inFlight returns the model requests inside the handler.
func (h *Handler) inFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflight
}

// limitListener accepts at most n connections open at once: Accept waits while n are open.
type limitListener struct {
	net.Listener
	slots chan struct{}
	once  sync.Once
	done  chan struct{}
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// Close closes the connection and frees its slot.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
	return err
}
