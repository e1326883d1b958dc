//go:build cuda

package cuda

import (
	"fmt"
	"sort"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

// launchProfile attributes a stretch of device time to every kernel launch: an event is recorded on the stream
// before the first launch and after each one, so the time between consecutive events is one kernel's run plus
// the gap before the next (with the stream held until the whole pass is queued, the gaps are the device's own).
// The events themselves add a little; the profiled total is compared with an unprofiled pass's device time.
type launchProfile struct {
	start cu.Event
	evs   []cu.Event
	names []string
	err   error
}

// beginProfile starts recording launches on q's stream; endProfile stops and returns them.
func (q *Queue) beginProfile() error {
	if q.d.prof != nil {
		return fmt.Errorf("cuda: a launch profile is already running")
	}
	p := &launchProfile{}
	var err error
	if p.start, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return cudrv.Wrap("cuEventCreate", err)
	}
	if err := p.start.Record(q.Stream()); err != nil {
		cu.DestroyEvent(&p.start)
		return cudrv.Wrap("cuEventRecord", err)
	}
	q.d.prof = p
	return nil
}

// mark records the end of launch name.
func (p *launchProfile) mark(s cu.Stream, name string) {
	if p.err != nil {
		return
	}
	e, err := cu.MakeEvent(cu.DefaultEvent)
	if err == nil {
		if err = e.Record(s); err != nil {
			cu.DestroyEvent(&e)
		}
	}
	if err != nil {
		p.err = cudrv.Wrap("cuEventRecord", err)
		return
	}
	p.evs = append(p.evs, e)
	p.names = append(p.names, name)
}

// launchTime is one launch's share of a profiled stretch.
type launchTime struct {
	Name string
	Sec  float64
}

// endProfile waits for the profiled work and returns each launch's time, in launch order.
func (q *Queue) endProfile() ([]launchTime, error) {
	p := q.d.prof
	if p == nil {
		return nil, fmt.Errorf("cuda: no launch profile is running")
	}
	q.d.prof = nil
	defer func() {
		cu.DestroyEvent(&p.start)
		for i := range p.evs {
			cu.DestroyEvent(&p.evs[i])
		}
	}()
	if p.err != nil {
		return nil, p.err
	}
	if err := q.Sync(); err != nil {
		return nil, err
	}
	out := make([]launchTime, len(p.evs))
	prev := p.start
	for i, e := range p.evs {
		ms, err := prev.Elapsed(e)
		if err != nil {
			return nil, cudrv.Wrap("cuEventElapsedTime", err)
		}
		out[i] = launchTime{p.names[i], float64(ms) / 1e3}
		prev = e
	}
	return out, nil
}

// kernelSum is the total time and count of the launches that share a name.
type kernelSum struct {
	Name  string
	Sec   float64
	Count int
}

// sumByName adds up launches by name, longest total first.
func sumByName(ts []launchTime) []kernelSum {
	idx := map[string]int{}
	var out []kernelSum
	for _, t := range ts {
		i, ok := idx[t.Name]
		if !ok {
			i = len(out)
			idx[t.Name] = i
			out = append(out, kernelSum{Name: t.Name})
		}
		out[i].Sec += t.Sec
		out[i].Count++
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Sec > out[b].Sec })
	return out
}
