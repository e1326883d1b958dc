package layers

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// The golden fixtures (scripts/golden/FORMAT.md) hold tiny Kev checkpoints
// and what the PyTorch reference computed from them in fp32: every layer's
// hidden states of every question row, and the pointer probabilities.

// goldenTol bounds both the per-layer relative Frobenius error of the hidden
// states and the absolute error of each probability.
const goldenTol = 1e-4

type goldenRow struct {
	QID    string  `json:"qid"`
	IDs    []int32 `json:"ids"`
	Decide int     `json:"decide"` // into state_ids + ids
	Opts   []int   `json:"opts"`
}

type goldenCase struct {
	Name          string      `json:"name"`
	StateIDs      []int32     `json:"state_ids"`
	Rows          []goldenRow `json:"rows"`
	Probabilities [][]float32 `json:"probabilities"`
}

type goldenCases struct {
	Fixture     string       `json:"fixture"`
	Temperature float64      `json:"temperature"`
	Cases       []goldenCase `json:"cases"`
}

func goldenRoot(t testing.TB, fixture string) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", "golden", fixture)
	if _, err := os.Stat(filepath.Join(dir, "reference", "cases.json")); err != nil {
		t.Skipf("golden fixture %s not present", fixture)
	}
	return dir
}

func readGoldenCases(t testing.TB, path string) *goldenCases {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gc goldenCases
	if err := json.Unmarshal(data, &gc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(gc.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return &gc
}

// goldenModel loads a checkpoint with an fp32 merge onto a fresh CPU backend.
func goldenModel(t testing.TB, kevDir, baseDir string) (*Model, *Pointer, tensor.Backend) {
	t.Helper()
	ck, err := checkpoint.Open(kevDir, baseDir, checkpoint.Options{DType: qwen35.F32})
	if err != nil {
		t.Fatal(err)
	}
	b := cpu.New()
	m, err := New(b, ck.Weights)
	if err != nil {
		t.Fatal(err)
	}
	h := ck.Head
	p, err := NewPointer(b, h.QWeight, h.QBias, h.KWeight, h.KBias, h.Temperature)
	if err != nil {
		t.Fatal(err)
	}
	return m, p, b
}

// layerErr is the error of one hidden-state block against its reference.
type layerErr struct {
	rel, abs float64 // ‖Δ‖/‖ref‖ (Frobenius) and max |Δ|
}

func compareBlock(got, want []float32) layerErr {
	var num, den, worst float64
	for i, w := range want {
		d := float64(got[i]) - float64(w)
		if math.IsNaN(d) {
			return layerErr{math.Inf(1), math.Inf(1)}
		}
		num += d * d
		den += float64(w) * float64(w)
		worst = math.Max(worst, math.Abs(d))
	}
	return layerErr{math.Sqrt(num) / math.Max(math.Sqrt(den), 1e-30), worst}
}

// worst tracks the largest errors seen and where.
type worst struct {
	rel, abs, prob       float64
	relAt, absAt, probAt string
}

func (w *worst) layer(e layerErr, at string) {
	if e.rel > w.rel {
		w.rel, w.relAt = e.rel, at
	}
	if e.abs > w.abs {
		w.abs, w.absAt = e.abs, at
	}
}

// probs is probsTol at goldenTol.
func (w *worst) probs(t *testing.T, got, want []float32, at string) {
	t.Helper()
	w.probsTol(t, got, want, at, goldenTol)
}

// hiddenRef reads the reference hidden states of one case.
type hiddenRef struct {
	f      *safetensors.File
	layers int // decoder layers L: points l0 … lL, then final
}

// block returns the reference of point p (0 … L+1) for part ("state" or
// "q<i>") of case c, [rows·d] flat.
func (h *hiddenRef) block(t *testing.T, c int, part string, p int) []float32 {
	t.Helper()
	name := fmt.Sprintf("c%d.%s.l%d", c, part, p)
	if p == h.layers+1 {
		name = fmt.Sprintf("c%d.%s.final", c, part)
	}
	tt, err := h.f.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tt.Float32()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pointName names an observation point as hidden.safetensors does.
func pointName(p, layers int) string {
	if p == layers+1 {
		return "final"
	}
	return fmt.Sprintf("l%d", p)
}

func TestGoldenHidden(t *testing.T) {
	for _, fx := range []string{"tiny-a", "tiny-b"} {
		t.Run(fx, func(t *testing.T) {
			dir := goldenRoot(t, fx)
			gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			m, ptr, b := goldenModel(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"))
			hf, err := safetensors.Open(filepath.Join(dir, "reference", "hidden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer hf.Close()
			ref := &hiddenRef{f: hf, layers: m.Config.NumLayers}
			var full, cont worst
			for ci, c := range gc.Cases {
				goldenFullRows(t, m, ptr, b, ref, ci, &c, &full)
				goldenContinued(t, m, ptr, b, ref, ci, &c, &cont)
			}
			t.Logf("%s full rows:   hidden rel %.3g (%s), max abs %.3g (%s); probabilities max |Δ| %.3g (%s)",
				fx, full.rel, full.relAt, full.abs, full.absAt, full.prob, full.probAt)
			t.Logf("%s prefill+rows: hidden rel %.3g (%s), max abs %.3g (%s); probabilities max |Δ| %.3g (%s)",
				fx, cont.rel, cont.relAt, cont.abs, cont.absAt, cont.prob, cont.probAt)
		})
	}
}

// goldenFullRows runs each question's row, state + branch, as one Prefill
// and checks every layer of it and the probabilities.
func goldenFullRows(t *testing.T, m *Model, ptr *Pointer, b tensor.Backend, ref *hiddenRef, ci int, c *goldenCase, w *worst) {
	t.Helper()
	d, L := m.Config.HiddenSize, m.Config.NumLayers
	for qi, r := range c.Rows {
		got := observe(t, m, b)
		row := append(append([]int32{}, c.StateIDs...), r.IDs...)
		s, h, err := m.Prefill(row)
		if err != nil {
			t.Fatal(err)
		}
		s.Free()
		for p := 0; p <= L+1; p++ {
			at := fmt.Sprintf("%s q%d %s", c.Name, qi, pointName(p, L))
			want := append(ref.block(t, ci, "state", p), ref.block(t, ci, fmt.Sprintf("q%d", qi), p)...)
			if len(got[p]) != len(row)*d || len(want) != len(row)*d {
				t.Fatalf("%s: got %d values, reference %d, want %d", at, len(got[p]), len(want), len(row)*d)
			}
			e := compareBlock(got[p], want)
			w.layer(e, "full "+at)
			if e.rel > goldenTol {
				t.Errorf("full row %s: relative error %.3g (max abs %.3g)", at, e.rel, e.abs)
			}
		}
		probs, err := ptr.Probabilities(h, r.Decide, r.Opts)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(h)
		w.probs(t, probs, c.Probabilities[qi], fmt.Sprintf("full %s q%d", c.Name, qi))
	}
	m.Observe = nil
}

// goldenContinued runs the state once (Prefill) and every question row
// continuing it in one ContinueRows pass, checking the state's layers once
// and each row's.
func goldenContinued(t *testing.T, m *Model, ptr *Pointer, b tensor.Backend, ref *hiddenRef, ci int, c *goldenCase, w *worst) {
	t.Helper()
	d, L := m.Config.HiddenSize, m.Config.NumLayers
	ns := len(c.StateIDs)
	got := observe(t, m, b)
	s, hs, err := m.Prefill(c.StateIDs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	b.Free(hs)
	for p := 0; p <= L+1; p++ {
		at := fmt.Sprintf("%s state %s", c.Name, pointName(p, L))
		e := compareBlock(got[p], ref.block(t, ci, "state", p))
		w.layer(e, "prefill "+at)
		if e.rel > goldenTol {
			t.Errorf("prefill %s: relative error %.3g (max abs %.3g)", at, e.rel, e.abs)
		}
	}
	rows := make([][]int32, len(c.Rows))
	for i, r := range c.Rows {
		rows[i] = r.IDs
	}
	got = observe(t, m, b)
	h, err := m.ContinueRows(s, rows)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(h)
	off := 0
	for qi, r := range c.Rows {
		n := len(r.IDs)
		for p := 0; p <= L+1; p++ {
			at := fmt.Sprintf("%s q%d %s", c.Name, qi, pointName(p, L))
			e := compareBlock(got[p][off*d:(off+n)*d], ref.block(t, ci, fmt.Sprintf("q%d", qi), p))
			w.layer(e, "rows "+at)
			if e.rel > goldenTol {
				t.Errorf("continued row %s: relative error %.3g (max abs %.3g)", at, e.rel, e.abs)
			}
		}
		opts := make([]int, len(r.Opts))
		for j, o := range r.Opts {
			opts[j] = off + o - ns
		}
		probs, err := ptr.Probabilities(h, off+r.Decide-ns, opts)
		if err != nil {
			t.Fatal(err)
		}
		w.probs(t, probs, c.Probabilities[qi], fmt.Sprintf("rows %s q%d", c.Name, qi))
		off += n
	}
	m.Observe = nil
}

// TestGoldenFullCheckpoint runs the full-weight form of tiny-a (kev-full:
// merged weights rounded once to bf16, no adapter) against its own
// reference probabilities, in both forms.
func TestGoldenFullCheckpoint(t *testing.T) {
	dir := goldenRoot(t, "tiny-a")
	if _, err := os.Stat(filepath.Join(dir, "reference", "cases-full.json")); err != nil {
		t.Skip("tiny-a has no kev-full reference")
	}
	gc := readGoldenCases(t, filepath.Join(dir, "reference", "cases-full.json"))
	m, ptr, b := goldenModel(t, filepath.Join(dir, "kev-full"), "")
	var full, cont worst
	for _, c := range gc.Cases {
		ns := len(c.StateIDs)
		s, hs, err := m.Prefill(c.StateIDs)
		if err != nil {
			t.Fatal(err)
		}
		b.Free(hs)
		rows := make([][]int32, len(c.Rows))
		for i, r := range c.Rows {
			rows[i] = r.IDs
		}
		h, err := m.ContinueRows(s, rows)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for qi, r := range c.Rows {
			opts := make([]int, len(r.Opts))
			for j, o := range r.Opts {
				opts[j] = off + o - ns
			}
			probs, err := ptr.Probabilities(h, off+r.Decide-ns, opts)
			if err != nil {
				t.Fatal(err)
			}
			cont.probs(t, probs, c.Probabilities[qi], fmt.Sprintf("rows %s q%d", c.Name, qi))
			off += len(r.IDs)

			fs, fh, err := m.Prefill(append(append([]int32{}, c.StateIDs...), r.IDs...))
			if err != nil {
				t.Fatal(err)
			}
			fs.Free()
			probs, err = ptr.Probabilities(fh, r.Decide, r.Opts)
			if err != nil {
				t.Fatal(err)
			}
			b.Free(fh)
			full.probs(t, probs, c.Probabilities[qi], fmt.Sprintf("full %s q%d", c.Name, qi))
		}
		b.Free(h)
		s.Free()
	}
	t.Logf("kev-full: probabilities max |Δ| full rows %.3g (%s), prefill+rows %.3g (%s)", full.prob, full.probAt, cont.prob, cont.probAt)
}
