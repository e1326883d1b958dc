//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/cudrv"
)

// BenchmarkPassGraphs times Kev's serving passes at Kev-4B shape (BenchmarkPass's four cases) issued eagerly and
// replayed as CUDA graphs, both inside Backend.Run (graphs of segmentOps operations, and of whole passes): the device time (the stream held behind a gate until the
// pass is queued; median of 15), the host time to queue the pass (median of the same 15), and the wall time with
// the read-back (median of 15), after three passes of warm-up (a record is captured at its second sighting). It
// checks that the replayed passes' hidden states equal the eager ones bit for bit. Last, it captures one eager
// pass directly with stream capture (graphs off) and reports the first call that breaks the capture.
func BenchmarkPassGraphs(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	w, be, m := kev4BModel(b, r)
	defer be.Trim()
	defer dev.restoreGraphs()
	segs := segmentOps
	defer func() { segmentOps = segs }()
	cases, g, done := servingSetup(b, r, m, be, w.Config.VocabSize)
	defer done()
	readBack := func(c passCase) ([]float32, time.Duration, error) {
		var out []float32
		var done func()
		t0 := time.Now()
		err := be.Run(func() error {
			h, d, err := c.run()
			done = d
			if err != nil {
				return err
			}
			out, err = be.ToHost(h)
			return err
		})
		el := time.Since(t0)
		if done != nil {
			done()
		}
		return out, el, err
	}
	for range b.N {
		for _, c := range cases {
			var ref []float32
			for _, mode := range []struct {
				name     string
				graphs   int
				segments int // segmentOps
			}{{"eager", 0, segs}, {"graph", defaultGraphs, segs}, {"graph-whole", defaultGraphs, 1 << 30}} {
				if err := dev.SetGraphs(mode.graphs); err != nil {
					b.Fatal(err)
				}
				segmentOps = mode.segments
				var walls []float64
				var out []float32
				for k := range 18 {
					o, el, err := readBack(c)
					if err != nil {
						b.Fatalf("%s %s: %v", c.name, mode.name, err)
					}
					if k >= 3 {
						walls = append(walls, el.Seconds())
					}
					out = o
				}
				if mode.graphs == 0 {
					ref = out
				} else if err := sameRows([][]float32{out}, [][]float32{ref}); err != nil {
					b.Errorf("%s: replayed pass differs from the eager one: %v", c.name, err)
				}
				s0, _ := dev.GraphCounts()
				l0 := be.Stats().Launches
				dsec, isec, err := gatedTimes(g, be.Run, c.run, 15, 3*median(walls))
				if err != nil {
					b.Fatalf("%s %s: %v", c.name, mode.name, err)
				}
				s1, _ := dev.GraphCounts()
				fmt.Printf("KEVBENCH graphs %q mode=%s device_ms=%.3f issue_ms=%.3f wall_ms=%.3f launches/pass=%d replays=%d eager=%d updated=%d captured=%d kept=%d failed=%d dropped=%d last_error=%q\n",
					c.name, mode.name, dsec*1e3, isec*1e3, median(walls)*1e3, (be.Stats().Launches-l0)/15,
					s1.Replays-s0.Replays, s1.Eager-s0.Eager, s1.Updated-s0.Updated, s1.Captured, s1.Kept, s1.Failed, s1.Dropped, s1.LastError)
			}
		}
	}
	segmentOps = segs
	// Direct stream capture of an eager pass: what breaks it.
	if err := dev.SetGraphs(0); err != nil {
		b.Fatal(err)
	}
	// (One case: a failed capture can leave the staging ring's events unusable for the rest of the process.)
	for _, c := range cases[1:2] {
		var perr, eerr error
		var done func()
		err := dev.Do(func(q *Queue) error {
			if err := cudrv.BeginCapture(q.s, cudrv.CaptureThreadLocal); err != nil {
				return err
			}
			_, done, perr = c.run()
			var gr cudrv.Graph
			gr, eerr = cudrv.EndCapture(q.s)
			if eerr == nil {
				if ex, err := gr.Instantiate(); err == nil {
					ex.Destroy()
				} else {
					eerr = err
				}
				gr.Destroy()
			}
			return nil
		})
		fmt.Printf("KEVBENCH graphs direct-capture %q pass_err=%v end_capture_err=%v do_err=%v\n", c.name, perr, eerr, err)
		dev.Do(func(q *Queue) error { return q.Sync() })
		if done != nil {
			done()
		}
	}
}
