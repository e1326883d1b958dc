package hub

import (
	"fmt"
	"github.com/kevgo/kev/internal/loadprogress"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often the progress line is redrawn.
const progressInterval = 200 * time.Millisecond

// progress draws one line, "\r"-redrawn, with files and bytes done. A nil
// *progress draws nothing.
type progress struct {
	w     io.Writer
	label string
	start time.Time

	files, filesDone atomic.Int64
	total, done      atomic.Int64 // bytes
	resumed          atomic.Int64 // bytes already on disk when a transfer started

	stop chan struct{}
	wg   sync.WaitGroup
	last int // width of the last line drawn
}

func newProgress(w io.Writer, label string, files int) *progress {
	if w == nil || w == io.Discard || files == 0 {
		return nil
	}
	p := &progress{w: w, label: label, start: time.Now(), stop: make(chan struct{})}
	p.files.Store(int64(files))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw(false)
			case <-p.stop:
				return
			}
		}
	}()
	return p
}

func (p *progress) addTotal(n int64) {
	if p != nil && n > 0 {
		p.total.Add(n)
	}
}

// fileProgress counts one file's bytes on disk into a progress, so that a
// resumed or restarted transfer is counted once.
type fileProgress struct {
	p       *progress
	counted int64
	started bool
}

// setHave says that n bytes of the file are on disk as a transfer starts.
func (f *fileProgress) setHave(n int64) {
	if f.p == nil {
		return
	}
	f.p.done.Add(n - f.counted)
	if !f.started {
		f.p.resumed.Add(n)
		f.started = true
	}
	f.counted = n
}

// add counts n more bytes written.
func (f *fileProgress) add(n int64) {
	if f.p == nil {
		return
	}
	f.p.done.Add(n)
	f.counted += n
}

func (p *progress) fileDone() {
	if p != nil {
		p.filesDone.Add(1)
	}
}

// close stops the redraw goroutine and draws the final line.
func (p *progress) close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.draw(true)
}

// draw is called from the redraw goroutine and, after it has stopped, from
// close, never from both at once.
func (p *progress) draw(final bool) {
	done, total := p.done.Load(), p.total.Load()
	line := fmt.Sprintf("%s: %d/%d files, %s", p.label, p.filesDone.Load(), p.files.Load(), loadprogress.Size(done))
	if total > 0 {
		line += fmt.Sprintf(" / %s (%d%%)", loadprogress.Size(total), done*100/max(total, done, 1))
	}
	if secs := time.Since(p.start).Seconds(); secs > 0 {
		rate := float64(done-p.resumed.Load()) / secs
		line += fmt.Sprintf(", %s/s", loadprogress.Size(int64(rate)))
		if rate > 0 && total > done && !final {
			line += fmt.Sprintf(", %.0f s left", float64(total-done)/rate)
		}
	}
	pad := ""
	if n := p.last - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.last = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}
