package cudrv

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startOwner runs an owner's goroutine the way Device does; teardowns counts
// how often its teardown ran.
func startOwner(t *testing.T) (*owner, *atomic.Int32) {
	t.Helper()
	o := newOwner()
	var teardowns atomic.Int32
	go o.serve(func() { teardowns.Add(1) })
	return o, &teardowns
}

// TestHardeningOwnerShutdown: Do racing Close from many goroutines either runs
// its function and returns its result or returns ErrClosed without running
// it; nothing panics or hangs, teardown runs once after the last function,
// and Close may be called again.
func TestHardeningOwnerShutdown(t *testing.T) {
	for round := range 50 {
		o, teardowns := startOwner(t)
		var ran, ok, closed atomic.Int64
		var afterTeardown atomic.Bool
		sentinel := errors.New("ran")
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					err := o.do(func() error {
						if teardowns.Load() != 0 {
							afterTeardown.Store(true)
						}
						ran.Add(1)
						return sentinel
					})
					switch err {
					case sentinel:
						ok.Add(1)
					case ErrClosed:
						closed.Add(1)
					default:
						t.Errorf("goroutine %d call %d: %v", g, i, err)
						return
					}
				}
			}()
		}
		if round%2 == 1 {
			runtime.Gosched()
		}
		o.close()
		wg.Wait()
		o.close() // again: no panic, no wait
		if ran.Load() != ok.Load() || ok.Load()+closed.Load() != 16*50 {
			t.Fatalf("round %d: ran %d, returned the result %d and ErrClosed %d times", round, ran.Load(), ok.Load(), closed.Load())
		}
		if n := teardowns.Load(); n != 1 || afterTeardown.Load() {
			t.Fatalf("round %d: %d teardowns, a function after teardown: %v", round, n, afterTeardown.Load())
		}
		if err := o.do(func() error { return nil }); err != ErrClosed {
			t.Fatalf("do after close = %v", err)
		}
	}
}

// TestHardeningOwnerPanicAndGoexit: a panic comes back as an error and the
// owner goes on; runtime.Goexit ends the goroutine, and later calls and Close
// return at once instead of hanging.
func TestHardeningOwnerPanicAndGoexit(t *testing.T) {
	o, teardowns := startOwner(t)
	if err := o.do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic: %v", err)
	}
	if err := o.do(func() error { return nil }); err != nil {
		t.Fatalf("after a panic: %v", err)
	}
	if err := o.do(func() error { runtime.Goexit(); return nil }); err != errGone {
		t.Fatalf("Goexit: %v", err)
	}
	finished := make(chan error, 1)
	go func() { finished <- o.do(func() error { return nil }) }()
	select {
	case err := <-finished:
		if err != errGone {
			t.Fatalf("after Goexit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do hangs after Goexit")
	}
	o.close()
	if teardowns.Load() != 0 {
		t.Error("teardown ran on a goroutine that was gone")
	}
}

// TestHardeningOwnerFailedStart: an owner whose goroutine never served (the
// context could not be made) answers ErrClosed-like errors, never hangs.
func TestHardeningOwnerFailedStart(t *testing.T) {
	o := newOwner()
	o.stop()
	if err := o.do(func() error { return nil }); err != errGone {
		t.Fatalf("do = %v", err)
	}
	o.close()
}
