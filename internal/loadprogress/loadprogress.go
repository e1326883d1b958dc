// Package loadprogress reports how a long load is going: bytes done of the total, the rate and the time left, as
// one redrawn line on a terminal or as log events elsewhere.
package loadprogress

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Reporter receives progress updates from any goroutine and shows them at most every Interval.
type Reporter struct {
	label    string
	w        io.Writer    // the line's terminal; nil for none
	log      *slog.Logger // events when there is no line; nil for none
	start    time.Time
	interval time.Duration

	mu    sync.Mutex
	last  time.Time
	width int
	drawn bool
}

// Interval is how often a Reporter redraws its line; log events come at most every LogInterval.
const (
	Interval    = 200 * time.Millisecond
	LogInterval = 2 * time.Second
)

// New returns a Reporter that draws on w, or logs Info events on log when w is nil (either may be nil).
func New(label string, w io.Writer, log *slog.Logger) *Reporter {
	r := &Reporter{label: label, w: w, log: log, start: time.Now(), interval: Interval}
	if w == nil {
		r.interval = LogInterval
	}
	return r
}

// Terminal returns os.Stderr when it is a terminal, else nil.
func Terminal() io.Writer {
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return os.Stderr
	}
	return nil
}

// Update reports done of total bytes.
func (r *Reporter) Update(done, total int64) {
	if r == nil || (r.w == nil && r.log == nil) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last) < r.interval && done < total {
		return
	}
	r.last = now
	r.show(done, total, now, false)
}

// Done draws the final line (ending it with a newline) or logs nothing more; the summary is the caller's.
func (r *Reporter) Done(done, total int64) {
	if r == nil || r.w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.show(done, total, time.Now(), true)
}

func (r *Reporter) show(done, total int64, now time.Time, final bool) {
	secs := now.Sub(r.start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(done) / secs
	}
	left := -1.0
	if rate > 0 && total >= done {
		left = float64(total-done) / rate
	}
	if r.w == nil {
		r.log.Info(r.label, "bytes", done, "total_bytes", total, "bytes_per_s", int64(rate), "seconds_left", round1(left))
		return
	}
	line := Line(r.label, done, total, rate, left)
	pad := ""
	if n := r.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	r.width = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(r.w, "\r%s%s%s", line, pad, end)
	r.drawn = true
}

// Line formats one progress line: "label: 3.1 GiB / 7.9 GiB (39%), 2.4 GiB/s, 2 s left" (the time left is left
// out when it is negative).
func Line(label string, done, total int64, rate, left float64) string {
	pct := int64(0)
	if total > 0 {
		pct = done * 100 / max(total, done)
	}
	s := fmt.Sprintf("%s: %s / %s (%d%%), %s/s", label, Size(done), Size(total), pct, Size(int64(rate)))
	if left >= 0 {
		s += fmt.Sprintf(", %.0f s left", left)
	}
	return s
}

// Size formats a byte count with binary units.
func Size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func round1(x float64) float64 { return float64(int64(x*10)) / 10 }
