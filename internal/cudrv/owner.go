package cudrv

import (
	"errors"
	"fmt"
	"sync"
)

// ErrClosed is returned by Do on a closed Device.
var ErrClosed = errors.New("cudrv: device is closed")

// errGone is returned by Do when the owning goroutine ended without Close:
// a function called runtime.Goexit on it.
var errGone = errors.New("cudrv: runtime.Goexit on the device goroutine; the device is unusable")

// owner runs functions one at a time on a single goroutine (a Device's OS
// thread) and shuts down explicitly: Close marks it closing under no lock
// but a channel close, so a Do racing with Close either hands its function
// over before the goroutine stops (and gets its result) or sees the closing
// mark and returns ErrClosed. No channel a sender uses is ever closed.
//
// It holds no CUDA state, so its shutdown is tested without a GPU.
type owner struct {
	work    chan func()   // unbuffered: a sent function is one the goroutine took
	closing chan struct{} // closed by close
	done    chan struct{} // closed when the goroutine has ended, however it ended
	once    sync.Once
}

func newOwner() *owner {
	return &owner{work: make(chan func()), closing: make(chan struct{}), done: make(chan struct{})}
}

// serve runs on the owning goroutine: it runs handed-over functions until
// close, then teardown (when not nil). It marks the owner done on every way
// out, runtime.Goexit included.
func (o *owner) serve(teardown func()) {
	defer close(o.done)
	for {
		select {
		case f := <-o.work:
			f()
		case <-o.closing:
			if teardown != nil {
				teardown()
			}
			return
		}
	}
}

// stop marks the owner done when its goroutine ends before serving (a
// failed start).
func (o *owner) stop() { close(o.done) }

// do hands f to the owning goroutine and returns its error; ErrClosed once
// close was called, or when the goroutine is gone. A panic in f comes back
// as an error; runtime.Goexit in f ends the goroutine and every later call
// fails.
func (o *owner) do(f func() error) error {
	res := make(chan error, 1)
	job := func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			if p := recover(); p != nil {
				res <- fmt.Errorf("cudrv: panic on the device goroutine: %v", p)
			} else { // runtime.Goexit (t.Fatal): the owning goroutine is ending
				res <- errGone
			}
		}()
		err := f()
		returned = true
		res <- err
	}
	select {
	case o.work <- job:
		return <-res
	case <-o.closing:
		return ErrClosed
	case <-o.done:
		return o.goneErr()
	}
}

// goneErr tells a goroutine ended by close (ErrClosed: close marks closing
// before the goroutine ends) from one that ended otherwise.
func (o *owner) goneErr() error {
	select {
	case <-o.closing:
		return ErrClosed
	default:
		return errGone
	}
}

// close stops the goroutine after the function it runs, if any, and waits
// until it has ended (and torn down). Functions not yet handed over get
// ErrClosed. Calling it again waits the same way and returns nil.
func (o *owner) close() {
	o.once.Do(func() { close(o.closing) })
	<-o.done
}
