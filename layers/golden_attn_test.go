package layers

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// The attention-only fixtures (scripts/golden/make_fixtures_attn.py) hold a
// tiny Kev checkpoint on a Qwen3 base and one on a Qwen2.5 base, with what
// PyTorch computed in fp32 with Kev's packed block-causal pass: the state
// and every branch in one sequence, each branch seeing the state and
// itself, positions restarting after the state.

// packedTol bounds the packed pass's fp32 error against that reference: the
// per-layer relative error of the hidden states and the absolute error of
// each probability.
const packedTol = 1e-5

var attnFixtures = []struct {
	name string
	arch qwen35.Arch
}{{"tiny-qwen3", qwen35.Qwen3}, {"tiny-qwen2", qwen35.Qwen2}}

// packedBatch is Kev's packed record as a Batch: the state as a new state,
// each question a row continuing it.
func packedBatch(c *goldenCase, keep bool) *Batch {
	bt := &Batch{New: []NewState{{IDs: c.StateIDs, Keep: keep}}}
	for _, r := range c.Rows {
		bt.Rows = append(bt.Rows, Row{IDs: r.IDs})
	}
	return bt
}

// queries maps each question's <decide> and </opt> indexes (into state +
// branch) to rows of a pass's hidden states, where the branch starts at
// out.At[i].Off.
func queries(c *goldenCase, out *Output) []tensor.PointerQuery {
	ns := len(c.StateIDs)
	qs := make([]tensor.PointerQuery, len(c.Rows))
	for i, r := range c.Rows {
		off := out.At[i].Off - ns
		q := tensor.PointerQuery{Decide: off + r.Decide}
		for _, o := range r.Opts {
			q.Opts = append(q.Opts, off+o)
		}
		qs[i] = q
	}
	return qs
}

func TestGoldenPacked(t *testing.T) {
	for _, fx := range attnFixtures {
		t.Run(fx.name, func(t *testing.T) {
			dir := goldenRoot(t, fx.name)
			gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			m, ptr, b := goldenModel(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"))
			if m.Config.Arch != fx.arch || m.Config.Hybrid() {
				t.Fatalf("loaded as %v (hybrid %v), want %v", m.Config.Arch, m.Config.Hybrid(), fx.arch)
			}
			hf, err := safetensors.Open(filepath.Join(dir, "reference", "hidden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer hf.Close()
			ref := &hiddenRef{f: hf, layers: m.Config.NumLayers}
			d, L := m.Config.HiddenSize, m.Config.NumLayers
			var packed, cached worst
			for ci := range gc.Cases {
				c := &gc.Cases[ci]
				ns := len(c.StateIDs)
				got := observe(t, m, b)
				out, err := m.Forward(packedBatch(c, true))
				if err != nil {
					t.Fatal(err)
				}
				m.Observe = nil
				// The packed sequence: the state, then each branch in order.
				for p := 0; p <= L+1; p++ {
					at := fmt.Sprintf("%s state %s", c.Name, pointName(p, L))
					e := compareBlock(got[p][:ns*d], ref.block(t, ci, "state", p))
					packed.layer(e, at)
					if e.rel > packedTol {
						t.Errorf("packed %s: relative error %.3g (max abs %.3g)", at, e.rel, e.abs)
					}
					for qi, r := range c.Rows {
						off := ns + out.At[qi].Off // Observe saw the whole pass, the state's rows first
						at := fmt.Sprintf("%s q%d %s", c.Name, qi, pointName(p, L))
						e := compareBlock(got[p][off*d:(off+len(r.IDs))*d], ref.block(t, ci, fmt.Sprintf("q%d", qi), p))
						packed.layer(e, at)
						if e.rel > packedTol {
							t.Errorf("packed %s: relative error %.3g (max abs %.3g)", at, e.rel, e.abs)
						}
					}
				}
				probs, err := ptr.ProbabilitiesBatch(out.Hidden[0], queries(c, out))
				if err != nil {
					t.Fatal(err)
				}
				for qi := range c.Rows {
					packed.probsTol(t, probs[qi], c.Probabilities[qi], fmt.Sprintf("packed %s q%d", c.Name, qi), packedTol)
				}
				state := out.States[0]
				out.Free()

				// A cache hit: the rows alone, attending to the kept state's keys and values.
				bt := &Batch{}
				for _, r := range c.Rows {
					bt.Rows = append(bt.Rows, Row{IDs: r.IDs, Cached: state})
				}
				hit, err := m.Forward(bt)
				if err != nil {
					t.Fatal(err)
				}
				hp, err := ptr.ProbabilitiesBatch(hit.Hidden[0], queries(c, hit))
				if err != nil {
					t.Fatal(err)
				}
				for qi := range c.Rows {
					cached.probsTol(t, hp[qi], c.Probabilities[qi], fmt.Sprintf("cached %s q%d", c.Name, qi), packedTol)
					for j := range hp[qi] {
						if hp[qi][j] != probs[qi][j] {
							t.Errorf("cached %s q%d: p[%d] = %v, the packed pass gave %v", c.Name, qi, j, hp[qi][j], probs[qi][j])
						}
					}
				}
				hit.Free()
				state.Free()
			}
			t.Logf("%s packed: hidden rel %.3g (%s), max abs %.3g (%s); probabilities max |Δ| %.3g (%s)",
				fx.name, packed.rel, packed.relAt, packed.abs, packed.absAt, packed.prob, packed.probAt)
			t.Logf("%s cached state: probabilities max |Δ| %.3g (%s)", fx.name, cached.prob, cached.probAt)
		})
	}
}

// TestGoldenPackedBatchInvariant runs every case of a fixture alone and all
// of them in one packed batch: each request's probabilities must not depend
// on its batch-mates, bit for bit.
func TestGoldenPackedBatchInvariant(t *testing.T) {
	for _, fx := range attnFixtures {
		t.Run(fx.name, func(t *testing.T) {
			dir := goldenRoot(t, fx.name)
			gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			m, ptr, _ := goldenModel(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"))
			alone := make([][][]float32, len(gc.Cases))
			all := &Batch{}
			for ci := range gc.Cases {
				c := &gc.Cases[ci]
				out, err := m.Forward(packedBatch(c, false))
				if err != nil {
					t.Fatal(err)
				}
				if alone[ci], err = ptr.ProbabilitiesBatch(out.Hidden[0], queries(c, out)); err != nil {
					t.Fatal(err)
				}
				out.Free()
				all.New = append(all.New, NewState{IDs: c.StateIDs})
				for _, r := range c.Rows {
					all.Rows = append(all.Rows, Row{IDs: r.IDs, New: ci})
				}
			}
			out, err := m.Forward(all)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Free()
			row := 0
			for ci := range gc.Cases {
				c := &gc.Cases[ci]
				for qi, r := range c.Rows {
					at := out.At[row]
					off := at.Off - len(c.StateIDs)
					q := tensor.PointerQuery{Decide: off + r.Decide}
					for _, o := range r.Opts {
						q.Opts = append(q.Opts, off+o)
					}
					p, err := ptr.ProbabilitiesBatch(out.Hidden[at.Part], []tensor.PointerQuery{q})
					if err != nil {
						t.Fatal(err)
					}
					for j := range p[0] {
						if p[0][j] != alone[ci][qi][j] {
							t.Errorf("%s q%d: p[%d] = %v in the batch, %v alone", c.Name, qi, j, p[0][j], alone[ci][qi][j])
						}
					}
					row++
				}
			}
		})
	}
}

// TestGoldenPackedRowForm checks the attention-only fixtures in the row form
// too (each question one causal row, state + branch), which Kev uses past
// ROW_PASS_TOKENS: the same function as the packed pass.
func TestGoldenPackedRowForm(t *testing.T) {
	if testing.Short() {
		t.Skip("row form of the attention-only fixtures: not in -short")
	}
	for _, fx := range attnFixtures {
		t.Run(fx.name, func(t *testing.T) {
			dir := goldenRoot(t, fx.name)
			gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			m, ptr, b := goldenModel(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"))
			hf, err := safetensors.Open(filepath.Join(dir, "reference", "hidden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer hf.Close()
			ref := &hiddenRef{f: hf, layers: m.Config.NumLayers}
			var full worst
			for ci, c := range gc.Cases {
				goldenFullRows(t, m, ptr, b, ref, ci, &c, &full)
			}
			if full.rel > packedTol || full.prob > packedTol {
				t.Errorf("row form: hidden rel %.3g (%s), probabilities %.3g (%s), want ≤ %g", full.rel, full.relAt, full.prob, full.probAt, packedTol)
			}
			t.Logf("%s row form: hidden rel %.3g, probabilities max |Δ| %.3g", fx.name, full.rel, full.prob)
		})
	}
}

// probsTol checks probabilities against the reference within tol and records the worst difference.
func (w *worst) probsTol(t *testing.T, got, want []float32, at string, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d probabilities, want %d", at, len(got), len(want))
		return
	}
	for j := range want {
		d := math.Abs(float64(got[j]) - float64(want[j]))
		if math.IsNaN(d) || d > tol {
			t.Errorf("%s: p[%d] = %v, want %v (|Δ| %.3g)", at, j, got[j], want[j], d)
		}
		if d > w.prob || math.IsNaN(d) {
			w.prob, w.probAt = d, at
		}
	}
}

// TestGoldenPackedUnbatched runs the attention-only fixtures through a backend without tensor.Batched: Forward then
// prefills the state and runs the rows with ContinueRows, which must give the packed pass's probabilities.
func TestGoldenPackedUnbatched(t *testing.T) {
	for _, fx := range attnFixtures {
		t.Run(fx.name, func(t *testing.T) {
			dir := goldenRoot(t, fx.name)
			gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			ck, err := checkpoint.Open(filepath.Join(dir, "kev"), filepath.Join(dir, "base"), checkpoint.Options{DType: qwen35.F32})
			if err != nil {
				t.Fatal(err)
			}
			b := plain{cpu.New()}
			m, err := New(b, ck.Weights)
			if err != nil {
				t.Fatal(err)
			}
			h := ck.Head
			ptr, err := NewPointer(b, h.QWeight, h.QBias, h.KWeight, h.KBias, h.Temperature)
			if err != nil {
				t.Fatal(err)
			}
			var w worst
			for ci := range gc.Cases {
				c := &gc.Cases[ci]
				out, err := m.Forward(packedBatch(c, false))
				if err != nil {
					t.Fatal(err)
				}
				for qi, r := range c.Rows {
					at := out.At[qi]
					q := tensor.PointerQuery{Decide: at.Off + r.Decide - len(c.StateIDs)}
					for _, o := range r.Opts {
						q.Opts = append(q.Opts, at.Off+o-len(c.StateIDs))
					}
					p, err := ptr.ProbabilitiesBatch(out.Hidden[at.Part], []tensor.PointerQuery{q})
					if err != nil {
						t.Fatal(err)
					}
					w.probsTol(t, p[0], c.Probabilities[qi], fmt.Sprintf("%s q%d", c.Name, qi), packedTol)
				}
				out.Free()
			}
			t.Logf("%s without tensor.Batched: probabilities max |Δ| %.3g (%s)", fx.name, w.prob, w.probAt)
		})
	}
}
