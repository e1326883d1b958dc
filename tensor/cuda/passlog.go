//go:build cuda

package cuda

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

// passLog writes one JSON line per top-level Run while KEV_CUDA_PASS_LOG names a file: the Run's host time, and for
// every wait for the device inside it (Sync, Download), when the host began to wait and when the device reached
// that point, both from the Run's start — an event is recorded on the stream at the start and before each wait, so
// a pass costs two events, not one per launch, and programmatic dependent launch keeps working between its
// kernels. Where the device reaches a wait later than the pass's own device time (a gated profile, with the stream
// held until the whole pass is queued), the difference is time the device spent waiting for the host; what the
// Run takes after the last wait is the host's work on the results. With KEV_CUDA_PASS_LOG_LAUNCHES=1 an event
// also follows every launch (which stops each kernel from starting under the previous one's tail) and the line
// lists every launch: its kernel, when the host launched it and when the device had finished it. Passes recorded
// as CUDA graphs (KEV_CUDA_GRAPHS) are not logged.
//
//	{"host_ms": x, "launches": n, "syncs": n, "direct": n, "stalls": n,
//	 "waits": [{"host_ms": x, "device_ms": x}, ...], "launch": [["module.kernel", host_ms, device_ms], ...]}
type passLog struct {
	w         io.WriteCloser
	perLaunch bool
	active    bool
	start     cu.Event
	evs       []cu.Event // recorded at the marks, in order (reused across passes)
	hosts     []time.Duration
	names     []string // per mark: the kernel launched, or "" for a wait
	n         int      // marks recorded in this pass
	h0        time.Time
	err       error // the first error; the log stops after it
}

// passLogFromEnv opens the file KEV_CUDA_PASS_LOG names (appending), or returns nil when it is unset.
func passLogFromEnv() (*passLog, error) {
	path := strings.TrimSpace(os.Getenv("KEV_CUDA_PASS_LOG"))
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cuda: KEV_CUDA_PASS_LOG: %w", err)
	}
	on := strings.TrimSpace(os.Getenv("KEV_CUDA_PASS_LOG_LAUNCHES"))
	return &passLog{w: f, perLaunch: on != "" && on != "0" && on != "off"}, nil
}

// run runs f, a top-level Run's work, logging it (on the goroutine that owns the context).
func (p *passLog) run(q *Queue, f func() error) error {
	if p.err != nil {
		return f()
	}
	if p.start == (cu.Event{}) {
		if p.start, p.err = cu.MakeEvent(cu.DefaultEvent); p.err != nil {
			p.err = cudrv.Wrap("cuEventCreate", p.err)
			return f()
		}
	}
	d := q.d
	launches, syncs, direct, stalls := d.launches.Load(), d.syncs.Load(), d.direct.Load(), d.stalls.Load()
	p.n, p.hosts, p.names = 0, p.hosts[:0], p.names[:0]
	p.h0 = time.Now()
	if err := p.start.Record(q.s); err != nil {
		p.err = cudrv.Wrap("cuEventRecord", err)
		return f()
	}
	p.active = true
	err := f()
	host := time.Since(p.h0)
	p.active = false
	if p.err != nil {
		return err
	}
	if serr := q.s.Synchronize(); serr != nil {
		p.err = cudrv.Wrap("cuStreamSynchronize", serr)
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"host_ms":%.3f,"launches":%d,"syncs":%d,"direct":%d,"stalls":%d,"waits":[`, ms(host),
		d.launches.Load()-launches, d.syncs.Load()-syncs, d.direct.Load()-direct, d.stalls.Load()-stalls)
	dev := make([]float64, p.n)
	for i := range p.n {
		var eerr error
		if dev[i], eerr = p.start.Elapsed(p.evs[i]); eerr != nil {
			p.err = cudrv.Wrap("cuEventElapsedTime", eerr)
			return err
		}
	}
	sep := ""
	for i := range p.n {
		if p.names[i] == "" {
			fmt.Fprintf(&b, `%s{"host_ms":%.3f,"device_ms":%.3f}`, sep, ms(p.hosts[i]), dev[i])
			sep = ","
		}
	}
	b.WriteString("]")
	if p.perLaunch {
		b.WriteString(`,"launch":[`)
		sep = ""
		for i := range p.n {
			if p.names[i] != "" {
				fmt.Fprintf(&b, `%s[%q,%.3f,%.3f]`, sep, p.names[i], ms(p.hosts[i]), dev[i])
				sep = ","
			}
		}
		b.WriteString("]")
	}
	b.WriteString("}\n")
	if _, werr := io.WriteString(p.w, b.String()); werr != nil {
		p.err = werr
	}
	return err
}

// tagLaunches reports whether launches are named with their GEMM shapes (a launch profile or a pass log of every
// launch is running).
func (d *Device) tagLaunches() bool {
	return d.prof != nil || d.plog != nil && d.plog.perLaunch && d.plog.active
}

// mark records the host's and the device's arrival at a wait (name "") or the launch of kernel name.
func (p *passLog) mark(s cu.Stream, name string) {
	if !p.active || p.err != nil {
		return
	}
	if p.n == len(p.evs) {
		e, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			p.err = cudrv.Wrap("cuEventCreate", err)
			return
		}
		p.evs = append(p.evs, e)
	}
	if err := p.evs[p.n].Record(s); err != nil {
		p.err = cudrv.Wrap("cuEventRecord", err)
		return
	}
	p.hosts = append(p.hosts, time.Since(p.h0))
	p.names = append(p.names, name)
	p.n++
}

// close destroys the events and closes the file.
func (p *passLog) close() error {
	if p.start != (cu.Event{}) {
		cu.DestroyEvent(&p.start)
	}
	for i := range p.evs {
		cu.DestroyEvent(&p.evs[i])
	}
	return p.w.Close()
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
