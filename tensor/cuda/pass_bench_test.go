//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"
	"time"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// kev4B returns a Qwen3.5 model of Kev-4B's shape (32 layers: three DeltaNet layers, then one attention layer,
// eight times; d = 2560) with random bf16 weights. Only one layer of each kind is drawn; the others share its host
// tensors (each layer still gets its own device copy), which keeps the set-up to a few seconds.
func kev4B(r *rand.Rand) *qwen35.Weights {
	lin, full := qwen35.LinearAttention, qwen35.FullAttention
	c := qwen35.Config{HiddenSize: 2560, NumLayers: 2, IntermediateSize: 9216, VocabSize: 1024, RMSNormEps: 1e-6,
		LayerTypes: []qwen35.LayerType{lin, full},
		NumHeads:   16, NumKVHeads: 4, HeadDim: 256, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
		LinearNumKeyHeads: 16, LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernel: 4}
	two := modelWeights(r, c)
	c.NumLayers = 32
	c.LayerTypes = nil
	for i := 0; i < c.NumLayers; i++ {
		c.LayerTypes = append(c.LayerTypes, lin)
		if i%4 == 3 {
			c.LayerTypes[i] = full
		}
	}
	w := &qwen35.Weights{Config: c, Tensors: map[string]*qwen35.Tensor{}}
	for name, t := range two.Tensors {
		if !strings.HasPrefix(name, "layers.") {
			w.Tensors[name] = t
		}
	}
	for i, lt := range c.LayerTypes {
		src := "layers.0."
		if lt == full {
			src = "layers.1."
		}
		for name, t := range two.Tensors {
			if rest, ok := strings.CutPrefix(name, src); ok {
				w.Tensors[fmt.Sprintf("layers.%d.%s", i, rest)] = t
			}
		}
	}
	return w
}

// gate holds the device's stream behind a run of fills on a second stream, so that a whole pass can be queued
// before its first kernel starts: the time from the gate's opening to the pass's end is then its device time.
type gate struct {
	s        cu.Stream
	buf      Buffer
	open     cu.Event // recorded on s after the fills
	t0, t1   cu.Event // on the device stream: after the gate, after the pass
	fillTime float64  // seconds per fill
}

const gateFill = 1 << 29 // bf16 elements per fill (1 GiB)

// openGate opens a gate on the test device, closed when tb's test or benchmark ends.
func openGate(tb testing.TB) *gate {
	tb.Helper()
	var g *gate
	if err := dev.Do(func(q *Queue) error { var err error; g, err = newGate(q); return err }); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Do(func(q *Queue) error { g.close(q); return nil }) })
	return g
}

func newGate(q *Queue) (*gate, error) {
	g := &gate{}
	var err error
	if g.s, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, cudrv.Wrap("cuStreamCreate", err)
	}
	if g.buf, err = q.Alloc(2 * gateFill); err != nil {
		return nil, err
	}
	for _, e := range []*cu.Event{&g.open, &g.t0, &g.t1} {
		if *e, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
			return nil, cudrv.Wrap("cuEventCreate", err)
		}
	}
	gq := &Queue{d: q.d, s: g.s}
	sec, err := medianTime(gq, 10, func(i int) error { return gq.FillUniform(g.buf, gateFill, uint32(i), 1) })
	g.fillTime = sec
	return g, err
}

func (g *gate) close(q *Queue) {
	q.Free(g.buf)
	for _, e := range []*cu.Event{&g.open, &g.t0, &g.t1} {
		cu.DestroyEvent(e)
	}
	g.s.Destroy()
}

// hold queues fills lasting about sec on the gate's stream and makes the device stream wait for them.
func (g *gate) hold(q *Queue, sec float64) error {
	gq := &Queue{d: q.d, s: g.s}
	n := int(sec/g.fillTime) + 1
	for i := 0; i < n; i++ {
		if err := gq.FillUniform(g.buf, gateFill, uint32(i), 1); err != nil {
			return err
		}
	}
	if err := g.open.Record(g.s); err != nil {
		return cudrv.Wrap("cuEventRecord", err)
	}
	if err := q.s.Wait(g.open, 0); err != nil {
		return cudrv.Wrap("cuStreamWaitEvent", err)
	}
	return cudrv.Wrap("cuEventRecord", g.t0.Record(q.s))
}

// release records the pass's end and returns its device time and whether the gate was still closed when the
// whole pass had been queued (otherwise the device may have waited for the host, and the time is not valid).
func (g *gate) release(q *Queue) (sec float64, valid bool, err error) {
	valid = g.open.Query() != nil // not yet complete
	if err := g.t1.Record(q.s); err != nil {
		return 0, false, cudrv.Wrap("cuEventRecord", err)
	}
	if err := g.t1.Synchronize(); err != nil {
		return 0, false, cudrv.Wrap("cuEventSynchronize", err)
	}
	ms, err := g.t0.Elapsed(g.t1)
	return ms / 1e3, valid, cudrv.Wrap("cuEventElapsedTime", err)
}

// kev4BModel is kev4B's model on a new backend of the test device (the caller trims the backend).
func kev4BModel(b *testing.B, r *rand.Rand) (*qwen35.Weights, *Backend, *layers.Model) {
	b.Helper()
	return kev4BModelWith(b, r, layers.Options{})
}

// kev4BModelWith is kev4BModel loaded with opts (FP8 products, say).
func kev4BModelWith(b *testing.B, r *rand.Rand, opts layers.Options) (*qwen35.Weights, *Backend, *layers.Model) {
	b.Helper()
	w := kev4B(r)
	be := NewOn(dev)
	m, err := layers.NewWith(be, w, opts)
	if err != nil {
		be.Trim()
		b.Fatal(err)
	}
	return w, be, m
}

// gatedTimes runs pass n times through call (directly, or inside Backend.Run) with the device stream held behind
// the gate until the pass is queued, and returns the median device time and the median host time to queue it
// (seconds). hold is the first gate time; it doubles whenever the gate opened before the pass was queued (that
// run does not count). pass returns a cleanup, run after the pass's device time is read.
func gatedTimes(g *gate, call func(func() error) error, pass func() (tensor.Tensor, func(), error), n int, hold float64) (dev0, issue float64, err error) {
	var issues, devs []float64
	for tries := 0; len(devs) < n && tries < 4*n; tries++ {
		if err := dev.Do(func(q *Queue) error { return g.hold(q, hold) }); err != nil {
			return 0, 0, err
		}
		var done func()
		t0 := time.Now()
		err := call(func() error {
			var err error
			_, done, err = pass()
			return err
		})
		el := time.Since(t0).Seconds()
		var sec float64
		var valid bool
		if rerr := dev.Do(func(q *Queue) error { var err error; sec, valid, err = g.release(q); return err }); rerr != nil {
			return 0, 0, rerr
		}
		if done != nil {
			done()
		}
		if err != nil {
			return 0, 0, err
		}
		if !valid {
			hold *= 2
			continue
		}
		issues = append(issues, el)
		devs = append(devs, sec)
	}
	if len(devs) == 0 {
		return 0, 0, fmt.Errorf("the gate opened before the pass was queued every time")
	}
	return median(devs), median(issues), nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// passCase is one of Kev's serving passes: run queues it and returns its hidden states and their cleanup.
type passCase struct {
	name string
	run  func() (tensor.Tensor, func(), error)
}

// servingSetup prefills a 100-token state on m and returns the serving passes on it (servingPasses) and a gate;
// done closes the gate and frees the state.
func servingSetup(b *testing.B, r *rand.Rand, m *layers.Model, be *Backend, vocab int) (cases []passCase, g *gate, done func()) {
	state, h, err := m.Prefill(randomIDs(r, 100, vocab))
	if err != nil {
		b.Fatal(err)
	}
	be.Free(h)
	cases = servingPasses(r, m, be, vocab, state)
	if err := dev.Do(func(q *Queue) error { var err error; g, err = newGate(q); return err }); err != nil {
		state.Free()
		b.Fatal(err)
	}
	return cases, g, func() {
		dev.Do(func(q *Queue) error { g.close(q); return nil })
		state.Free()
	}
}

// servingPasses returns the passes the pass benchmarks time on m: 2 and 6 question rows of 40 random tokens on
// state (a 100-token prefix), and prefills of 64 and 512 random tokens.
func servingPasses(r *rand.Rand, m *layers.Model, be *Backend, vocab int, state *layers.State) []passCase {
	prefill := func(n int) passCase {
		ids := randomIDs(r, n, vocab)
		return passCase{fmt.Sprintf("prefill T=%d", n), func() (tensor.Tensor, func(), error) {
			s, h, err := m.Prefill(ids)
			return h, func() { s.Free(); be.Free(h) }, err
		}}
	}
	rows := func(n int) passCase {
		rs := make([][]int32, n)
		for i := range rs {
			rs[i] = randomIDs(r, 40, vocab)
		}
		return passCase{fmt.Sprintf("rows %dx40 on 100", n), func() (tensor.Tensor, func(), error) {
			h, err := m.ContinueRows(state, rs)
			return h, func() { be.Free(h) }, err
		}}
	}
	return []passCase{rows(2), rows(6), prefill(64), prefill(512)}
}

// BenchmarkPass times model passes of Kev-4B shape in two modes: every operation handed over to the device
// goroutine ("hop"), and the whole pass inside Backend.Run ("run"). For each it reports the wall time of the
// pass with its read-back (median of 9), the host time to queue it, and its device time (the stream held behind
// a gate until the whole pass was queued; median of 3), with the pass's counters. With KEV_PASS_PROFILE=dir it
// also writes a CPU profile of 40 passes per mode of the 6-row case to dir.
func BenchmarkPass(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Now()
	w, be, m := kev4BModel(b, r)
	defer be.Trim()
	fmt.Printf("KEVBENCH pass setup s=%.1f\n", time.Since(t0).Seconds())
	cases, g, done := servingSetup(b, r, m, be, w.Config.VocabSize)
	defer done()
	fmt.Printf("KEVBENCH pass gate fill_us=%.1f\n", g.fillTime*1e6)
	modes := []struct {
		name string
		call func(f func() error) error
	}{
		{"hop", func(f func() error) error { return f() }},
		{"run", be.Run},
	}
	for range b.N {
		for _, c := range cases {
			for _, md := range modes {
				// Wall time: queue the pass, read its last row back.
				one := func() (time.Duration, Stats, error) {
					var h tensor.Tensor
					var done func()
					s0 := be.Stats()
					t0 := time.Now()
					err := md.call(func() error {
						var err error
						if h, done, err = c.run(); err != nil {
							return err
						}
						_, err = be.ToHost(h)
						return err
					})
					el := time.Since(t0)
					s1 := be.Stats()
					if done != nil {
						done()
					}
					return el, diffStats(s1, s0), err
				}
				for range 2 {
					if _, _, err := one(); err != nil {
						b.Fatal(err)
					}
				}
				var walls []float64
				var st Stats
				for range 9 {
					el, s, err := one()
					if err != nil {
						b.Fatal(err)
					}
					walls = append(walls, el.Seconds())
					st = s
				}
				wall := median(walls)
				// Device time: the stream waits behind the gate while the pass is queued.
				dsec, isec, err := gatedTimes(g, md.call, c.run, 3, 3*wall)
				if err != nil {
					b.Fatalf("%s %s: %v", c.name, md.name, err)
				}
				fmt.Printf("KEVBENCH pass %q mode=%s wall_ms=%.3f issue_ms=%.3f device_ms=%.3f wall/device=%.2f hops=%d inline=%d launches=%d syncs=%d staged=%d direct=%d stalls=%d maps=%d/%d driver_allocs=%d\n",
					c.name, md.name, wall*1e3, isec*1e3, dsec*1e3, wall/dsec,
					st.Hops, st.Inline, st.Launches, st.Syncs, st.Staged, st.Direct, st.StageStalls, st.MapsEncoded,
					st.MapsEncoded+st.MapsReused, st.DriverAllocs)
				b.ReportMetric(wall*1e3, "ms/"+md.name)
			}
		}
		if dir := os.Getenv("KEV_PASS_PROFILE"); dir != "" {
			for _, md := range modes {
				if err := profilePasses(filepath.Join(dir, "pass-rows6-"+md.name+".prof"), 40, func() error {
					return md.call(func() error {
						h, done, err := cases[1].run()
						if err == nil {
							_, err = be.ToHost(h)
						}
						if done != nil {
							done()
						}
						return err
					})
				}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

func diffStats(a, b Stats) Stats {
	return Stats{Hops: a.Hops - b.Hops, Inline: a.Inline - b.Inline, Launches: a.Launches - b.Launches,
		Syncs: a.Syncs - b.Syncs, Staged: a.Staged - b.Staged, Direct: a.Direct - b.Direct,
		StageStalls: a.StageStalls - b.StageStalls, MapsEncoded: a.MapsEncoded - b.MapsEncoded,
		MapsReused: a.MapsReused - b.MapsReused, DriverAllocs: a.DriverAllocs - b.DriverAllocs}
}

// profilePasses writes a CPU profile of n calls of pass to path.
func profilePasses(path string, n int, pass func() error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	for range n {
		if err := pass(); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkUploadCost measures what an upload between two kernels costs the stream: 100 small launches
// (fill_uniform_bf16 over 256 elements) back to back, then each after an upload of n bytes (64 B … 16 KiB), timed
// on the device behind the gate (median of 15). It prints one KEVBENCH line per size: µs a launch with its upload.
func BenchmarkUploadCost(b *testing.B) {
	gb := NewOn(dev)
	defer gb.Trim()
	g := openGate(b)
	var out, tab Buffer
	if err := dev.Do(func(q *Queue) error {
		var err error
		if out, err = q.Alloc(512); err != nil {
			return err
		}
		tab, err = q.Alloc(64 << 10)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer dev.Do(func(q *Queue) error { q.Free(out); q.Free(tab); return nil })
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	for range b.N {
		for _, n := range []int{0, 64, 256, 1 << 10, 2 << 10, 4 << 10, 16 << 10} {
			pass := func() (tensor.Tensor, func(), error) {
				return nil, nil, dev.Do(func(q *Queue) error {
					for i := range 100 {
						if n > 0 {
							if err := q.Upload(tab, src[:n]); err != nil {
								return err
							}
						}
						if err := q.FillUniform(out, 256, uint32(i), 1); err != nil {
							return err
						}
					}
					return nil
				})
			}
			for range 3 {
				if _, _, err := pass(); err != nil {
					b.Fatal(err)
				}
			}
			sec, _, err := gatedTimes(g, gb.Run, pass, 15, 0.02)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("KEVBENCH upload bytes=%d us_per_launch=%.2f\n", n, sec*1e6/100)
		}
	}
}
