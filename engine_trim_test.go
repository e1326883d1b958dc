package kev

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kevgo/kev/tensor"
)

// trimCounter is a backend that counts the times its pooled memory is handed back.
type trimCounter struct {
	tensor.Backend
	n atomic.Int32
}

func (b *trimCounter) Trim() error {
	b.n.Add(1)
	return errors.New("trim failed") // logged, not fatal
}

// TestIdleTrim checks that a replica hands its pooled memory back only once it has been idle for trimIdle after a
// batch, and not between requests that follow each other. Where a trim is due the test waits for it however long
// the machine takes; where none is, it looks for one for wait.
func TestIdleTrim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		idle  time.Duration
		wait  time.Duration
		trims bool
	}{
		{"idle long enough", 20 * time.Millisecond, 0, true},
		{"busy again before the clock runs out", time.Hour, 100 * time.Millisecond, false},
		{"never", -1, 100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &trimCounter{}
			e := newEngine(0, "cpu", b, nil, nil, Options{}, nil, slog.New(slog.DiscardHandler))
			e.trimIdle = tc.idle
			for range 3 { // batches back to back restart the clock
				e.armTrim()
			}
			taken := make(chan []chunk)
			go func() { taken <- e.take() }()
			if tc.trims {
				for b.n.Load() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			} else {
				time.Sleep(tc.wait)
			}
			e.mu.Lock()
			e.closed = true
			e.cond.Broadcast()
			e.mu.Unlock()
			if batch := <-taken; batch != nil {
				t.Fatalf("take on a closed, empty queue = %v, want nil", batch)
			}
			if got := b.n.Load(); (got > 0) != tc.trims || got > 1 {
				t.Errorf("trims = %d, want %v (at most one per idle period)", got, tc.trims)
			}
			if e.trimmer != nil {
				e.trimmer.Stop()
			}
		})
	}
}
