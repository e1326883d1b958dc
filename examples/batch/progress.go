package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress shows how far a run is on standard error: a bar redrawn in place on a terminal, or a line every
// tenth of the rows (and at the end) when standard error is a file or a pipe.
type progress struct {
	w      io.Writer
	bar    bool // redraw one line in place (a terminal)
	total  int
	start  time.Time
	now    func() time.Time
	done   int
	failed int
	drawn  time.Time // when the bar was last drawn
	width  int       // the length of the bar's line as last drawn
	step   int       // lines mode: the last tenth printed
}

// barWidth is the bar's width in characters.
const barWidth = 30

func newProgress(w io.Writer, bar bool, total int) *progress {
	p := &progress{w: w, bar: bar, total: total, now: time.Now}
	p.start = p.now()
	return p
}

// add counts one finished row and redraws when it is time.
func (p *progress) add(failed bool) {
	p.done++
	if failed {
		p.failed++
	}
	now := p.now()
	switch {
	case p.bar:
		if p.done == p.total || now.Sub(p.drawn) >= 100*time.Millisecond {
			p.drawn = now
			l := p.line(now)
			pad := max(p.width-len(l), 0) // blank out the end of a longer line before
			p.width = len(l)
			fmt.Fprintf(p.w, "\r%s%s", l, strings.Repeat(" ", pad))
		}
	case p.total > 0:
		if step := p.done * 10 / p.total; step > p.step || p.done == p.total {
			p.step = step
			fmt.Fprintln(p.w, p.line(now))
		}
	}
}

// finish ends the bar's line.
func (p *progress) finish() {
	if p.bar {
		fmt.Fprintln(p.w)
	}
}

// line is the progress text: [=====>    ]  45%  450/1000 rows  38.2 rows/s  ETA 14s  (2 failed).
func (p *progress) line(now time.Time) string {
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.done) / float64(p.total)
	}
	filled := int(frac * barWidth)
	bar := strings.Repeat("=", filled)
	if filled < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-filled-1)
	}
	el := now.Sub(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(p.done) / el
	}
	s := fmt.Sprintf("[%s] %3.0f%%  %d/%d rows  %.1f rows/s", bar, 100*frac, p.done, p.total, rate)
	if p.done < p.total && rate > 0 {
		if eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second)); eta >= time.Second {
			s += "  ETA " + eta.Round(time.Second).String()
		}
	}
	if p.failed > 0 {
		s += fmt.Sprintf("  (%d failed)", p.failed)
	}
	return s
}
