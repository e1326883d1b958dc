//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// BenchmarkPassKernels profiles the passes of Kev's serving cases at Kev-4B shape (random weights): a new state
// with its question rows in one pass, and the rows alone on the state kept from it, each with the batch-invariant
// GEMM plans and with the plans chosen from M, plus one pass of 64 such requests. For each it prints the pass's
// device time without events (median of 3, the stream held until the pass is queued), the profiled total, the time
// per kernel category and the longest kernels (name, launches, ms). KEV_PROFILE_CASES=name,… limits the cases;
// KEV_PROFILE_MODES=delta runs the invariant plans with the tensor-core delta rule (rows grouped by state, and
// ungrouped) and with the register kernels instead of the GEMM plan modes, KEV_PROFILE_MODES=invariant the
// invariant plans alone, KEV_PROFILE_MODES=gemm the invariant plans with today's GEMM schedule and the one before
// the per-M tile widths, KEV_PROFILE_MODES=order the invariant plans with the planned GEMM tile order (L2 groups,
// or m-fastest rotated by rounds) and plain m-fastest, KEV_PROFILE_MODES=groups with several group widths,
// KEV_PROFILE_MODES=tiles the invariant plans with every tile kernel and with the 128-row ones only,
// KEV_PROFILE_MODES=pdl with kernels launched as programmatic dependents (compute capability 9.0) and without,
// KEV_PROFILE_MODES=attn with attention blocks of a group's heads (flashGroup) and of one head,
// KEV_PROFILE_MODES=zerofill with GEMM X tensor maps over the rows past M (xRows) and ending at M (TMA's zero fill),
// KEV_PROFILE_MODES=attnorder with attention blocks longest first and in tile order,
// KEV_PROFILE_MODES=rows with the delta rule's rows in the blocks of gdn_state and on gdn_rows.
// KEV_PROFILE_UPLOADS=1 also prints how many uploads each pass made, by size. KEV_PROFILE_DTYPE=fp8 loads the
// products' weights in FP8 (layers.Options.FP8; the GEMM plan modes do not apply to its products).
func BenchmarkPassKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var opts layers.Options
	if os.Getenv("KEV_PROFILE_DTYPE") == "fp8" {
		if ok, why := dev.FP8Supported(); !ok {
			b.Skip(why)
		}
		opts.FP8 = true
	}
	w, be, m := kev4BModelWith(b, r, opts)
	defer be.Trim()
	type pcase struct {
		name  string
		state int
		rows  []int
		batch int // requests in the pass, each with its own state (1 when 0)
	}
	cases := []pcase{
		{"2q-short", 13, []int{38, 38}, 0},
		{"6q-short", 13, []int{40, 40, 40, 40, 40, 40}, 0},
		{"6q-kev", 34, []int{42, 73, 47, 22, 16, 22}, 0},    // bench-cases.json's 6-question case on a new ticket: one row of 73 tokens
		{"6q-kev257", 35, []int{42, 73, 47, 22, 16, 22}, 0}, // the same on a ticket numbered 10 … 99: 257 tokens, one past two 128-row tiles
		{"5q-370", 370, []int{40, 40, 40, 40, 37}, 0},
		{"5q-2200", 2200, []int{40, 40, 40, 40, 32}, 0},
		{"5q-2200r200", 2200, []int{40, 40, 40, 40, 40}, 0}, // bench-cases.json's rows: 200, one 64-row step past a 192-row tile
		{"64x6q-short", 13, []int{40, 40, 40, 40, 40, 40}, 64},
	}
	if only := os.Getenv("KEV_PROFILE_CASES"); only != "" {
		var keep []pcase
		for _, c := range cases {
			if strings.Contains(","+only+",", ","+c.name+",") {
				keep = append(keep, c)
			}
		}
		cases = keep
	}
	type pmode struct {
		name string
		byM  bool
		reg  bool // the register delta-rule kernels for every segment (no tensor-core kernels)
		flat bool // every row a segment of its own in the tensor-core delta rule (no grouping by state)
	}
	modes := []pmode{{"invariant", false, false, false}, {"byM", true, false, false}, {"invariant/prev-sched", false, false, false}}
	switch os.Getenv("KEV_PROFILE_MODES") {
	case "delta":
		modes = []pmode{{"invariant", false, false, false}, {"invariant/ungrouped", false, false, true}, {"invariant/reg-delta", false, true, false}}
	case "invariant":
		modes = modes[:1]
	case "gemm":
		modes = []pmode{modes[0], modes[2]}
	case "pdl":
		modes = []pmode{modes[0], {"invariant/nopdl", false, false, false}}
	case "tiles":
		modes = []pmode{modes[0], {"invariant/tiles128", false, false, false}}
	case "chunked":
		modes = []pmode{modes[0], {"invariant/no-chunked-tiles", false, false, false}}
	case "attn":
		modes = []pmode{modes[0], {"invariant/one-head", false, false, false}}
	case "attnorder":
		modes = []pmode{modes[0], {"invariant/attn-in-order", false, false, false}}
	case "zerofill":
		modes = []pmode{modes[0], {"invariant/zero-fill", false, false, false}}
	case "rows": // the question rows in the blocks of gdn_state, and on gdn_rows
		modes = []pmode{{"invariant/in-block", false, false, false}, {"invariant/gdn-rows", false, false, false}}
	case "order":
		modes = []pmode{modes[0], {"invariant/gn=1", false, false, false}}
	case "groups":
		modes = []pmode{modes[0]}
		for _, gn := range []int{1, 4, 8, 24} {
			modes = append(modes, pmode{fmt.Sprintf("invariant/gn=%d", gn), false, false, false})
		}
	}
	g := openGate(b)
	setByM := func(v bool) { _ = dev.Do(func(q *Queue) error { q.d.byM = v; return nil }) }
	defer setByM(false)
	pdl0 := dev.pdl
	defer dev.Do(func(q *Queue) error {
		schedPrev, schedBM, schedNoWC, flashOneHead, gemmZeroFill, q.d.gn, q.d.pdl = false, 0, false, false, false, 0, pdl0
		flashInOrder = false
		return nil
	})
	for range b.N {
		for _, c := range cases {
			reqs := max(1, c.batch)
			keepBatch, newBatch, cachedBatch := &layers.Batch{}, &layers.Batch{}, &layers.Batch{}
			keepRows := &layers.Batch{} // a new ticket as Kev serves it: the state kept for the prefix cache
			for q := range reqs {
				ids := randomIDs(r, c.state, w.Config.VocabSize)
				keepBatch.New = append(keepBatch.New, layers.NewState{IDs: ids, Keep: true})
				newBatch.New = append(newBatch.New, layers.NewState{IDs: ids})
				for _, n := range c.rows {
					newBatch.Rows = append(newBatch.Rows, layers.Row{IDs: randomIDs(r, n, w.Config.VocabSize), New: q})
				}
			}
			keepRows.New, keepRows.Rows = keepBatch.New, newBatch.Rows
			kept, err := m.Forward(keepBatch)
			if err != nil {
				b.Fatal(err)
			}
			states := kept.States
			kept.Free()
			for _, row := range newBatch.Rows {
				cachedBatch.Rows = append(cachedBatch.Rows, layers.Row{IDs: row.IDs, Cached: states[row.New]})
			}
			pass := func(bt *layers.Batch) func() error {
				return func() error {
					out, err := m.Forward(bt)
					if err == nil {
						for _, st := range out.States {
							st.Free()
						}
						out.Free()
					}
					return err
				}
			}
			for _, kind := range []struct {
				name string
				run  func() error
			}{{"new", pass(newBatch)}, {"new-kept", pass(keepRows)}, {"cached", pass(cachedBatch)}} {
				for _, mode := range modes {
					setByM(mode.byM)
					_ = dev.Do(func(q *Queue) error {
						schedPrev = strings.HasSuffix(mode.name, "prev-sched")
						q.d.pdl = pdl0 && !strings.HasSuffix(mode.name, "/nopdl")
						schedBM = 0
						if strings.HasSuffix(mode.name, "/tiles128") {
							schedBM = 128 // the schedules of 128-row tiles only (before the 192-row tiles)
						}
						schedNoWC = strings.HasSuffix(mode.name, "/no-chunked-tiles") // stream-K for chunked shapes, as before
						flashOneHead = strings.HasSuffix(mode.name, "/one-head")      // attention blocks of one head, as before the groups
						gemmZeroFill = strings.HasSuffix(mode.name, "/zero-fill")     // X tensor maps ending at M, as before xRows
						flashInOrder = strings.HasSuffix(mode.name, "/attn-in-order") // attention blocks in tile order, as before longest first
						q.d.gn = 0                                                    // "/gn=N": groups of N n-tiles in every GEMM's tile order (1: m-fastest, as before the groups)
						if _, v, ok := strings.Cut(mode.name, "/gn="); ok {
							q.d.gn, _ = strconv.Atoi(v)
						}
						return nil
					})
					gdnOn, gdnGroup = !mode.reg, !mode.flat
					rowsOn := gdnRowsOn
					gdnRowsOn = gdnRowsOn && !strings.HasSuffix(mode.name, "/in-block") || strings.HasSuffix(mode.name, "/gdn-rows")
					for range 2 { // warm-up: kernels loaded, pool filled
						if err := be.Run(kind.run); err != nil {
							b.Fatal(err)
						}
					}
					dev0, _, err := gatedTimes(g, be.Run, func() (tensor.Tensor, func(), error) { return nil, nil, kind.run() }, 3, 0.05)
					if err != nil {
						// A pass that waits for the device while it is queued (its uploads outgrow the staging
						// ring) cannot be held behind the gate: its kernels are still profiled.
						fmt.Printf("KEVPROF %q no unprofiled device time: %v\n", fmt.Sprintf("%s %s %s", c.name, kind.name, mode.name), err)
						dev0 = -1
					}
					var ts []launchTime
					if err := dev.Do(func(q *Queue) error { return g.hold(q, 0.2) }); err != nil {
						b.Fatal(err)
					}
					if err := dev.Do(func(q *Queue) error { return q.beginProfile() }); err != nil {
						b.Fatal(err)
					}
					var ups []int // KEV_PROFILE_UPLOADS=1: the sizes of the pass's uploads
					if os.Getenv("KEV_PROFILE_UPLOADS") == "1" {
						uploadTrace = func(n int) { ups = append(ups, n) }
					}
					runErr := be.Run(kind.run)
					uploadTrace = nil
					if err := dev.Do(func(q *Queue) error {
						if _, _, err := g.release(q); err != nil {
							return err
						}
						var err error
						ts, err = q.endProfile()
						return err
					}); err != nil {
						b.Fatal(err)
					}
					if runErr != nil {
						b.Fatal(runErr)
					}
					gdnOn, gdnGroup, gdnRowsOn = true, true, rowsOn
					printProfile(fmt.Sprintf("%s %s %s", c.name, kind.name, mode.name), dev0, ts)
					if len(ups) > 0 {
						printUploads(fmt.Sprintf("%s %s %s", c.name, kind.name, mode.name), ups)
					}
				}
			}
			for _, st := range states {
				st.Free()
			}
		}
	}
}

// kernelCategory groups a kernel by what it does, for the profile's summary.
func kernelCategory(name string) string {
	for _, c := range []struct{ prefix, cat string }{
		{"gemm", "gemm"}, {"fp8_sm90a.gemm", "gemm"}, {"fp8_sm90a.quant", "fp8-quant"}, {"ops.splitk_add_rmsnorm", "gemm-norm"}, {"delta.", "delta rule"}, {"gdn.", "delta rule"}, {"gdn_sm90a.", "delta rule"}, {"flash.", "attention"}, {"flash_sm90a.", "attention"}, {"attn", "attention"},
		{"segs.conv", "conv"}, {"nn.conv", "conv"}, {"ops.rmsnorm", "norms"}, {"nn.rms", "norms"}, {"nn.gated", "norms"},
		{"nn.qk", "norms"},
	} {
		if strings.HasPrefix(name, c.prefix) {
			return c.cat
		}
	}
	return "other"
}

func printProfile(label string, device float64, ts []launchTime) {
	var total float64
	cats := map[string]float64{}
	for _, t := range ts {
		total += t.Sec
		cats[kernelCategory(t.Name)] += t.Sec
	}
	dms := "n/a" // not measured: see the line before
	if device >= 0 {
		dms = fmt.Sprintf("%.3f", device*1e3)
	}
	fmt.Printf("KEVPROF %q device_ms=%s profiled_ms=%.3f launches=%d", label, dms, total*1e3, len(ts))
	for _, c := range []string{"gemm", "gemm-norm", "fp8-quant", "delta rule", "attention", "conv", "norms", "other"} {
		fmt.Printf(" %s=%.3f", strings.ReplaceAll(c, " ", "_"), cats[c]*1e3)
	}
	fmt.Println()
	for i, k := range sumByName(ts) {
		if i == 30 {
			break
		}
		fmt.Printf("KEVPROF %q   %8.3f ms %4d× %s\n", label, k.Sec*1e3, k.Count, k.Name)
	}
}

// printUploads prints how many uploads of each size class a pass made, and their bytes.
func printUploads(label string, ups []int) {
	bounds := []int{64, 256, 1 << 10, 2 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 30}
	count, bytes := make([]int, len(bounds)), make([]int, len(bounds))
	for _, n := range ups {
		k := 0
		for n > bounds[k] {
			k++
		}
		count[k]++
		bytes[k] += n
	}
	fmt.Printf("KEVPROF %q uploads=%d", label, len(ups))
	for k, b := range bounds {
		if count[k] > 0 {
			fmt.Printf(" ≤%d:%d(%dB)", b, count[k], bytes[k])
		}
	}
	fmt.Println()
}
