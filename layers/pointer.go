package layers

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Pointer is Kev's pointer head on a backend: for one question with final
// hidden states h_j at its </opt> tokens and h_d at its <decide> token,
// logit_j = (Wk·h_j + bk)·(Wq·h_d + bq)/√dp/T, probabilities = softmax over
// the question's options, in fp32.
type Pointer struct {
	b    tensor.Backend
	head tensor.PointerHead
}

// NewPointer uploads the head's weights (Wq, Wk [dp, d], bq, bk [dp]) as
// fp32. temperature T divides the logits (1 leaves them raw).
func NewPointer(b tensor.Backend, wq, bq, wk, bk *qwen35.Tensor, temperature float64) (*Pointer, error) {
	if wq == nil || wk == nil || bq == nil || bk == nil {
		return nil, fmt.Errorf("layers: pointer head: missing tensor")
	}
	if len(wq.Shape) != 2 {
		return nil, fmt.Errorf("layers: pointer head: q.weight has shape %v, want [dp, d]", wq.Shape)
	}
	if !(temperature > 0) || math.IsInf(temperature, 0) {
		return nil, fmt.Errorf("layers: pointer head: temperature %v is not a positive number", temperature)
	}
	dp, d := wq.Shape[0], wq.Shape[1]
	w := &qwen35.Weights{Tensors: map[string]*qwen35.Tensor{"q.weight": wq, "q.bias": bq, "k.weight": wk, "k.bias": bk}}
	p := &Pointer{b: b, head: tensor.PointerHead{Scale: float32(1 / math.Sqrt(float64(dp))), Temperature: float32(temperature)}}
	for _, s := range []struct {
		dst   *tensor.Tensor
		name  string
		shape []int
	}{{&p.head.Wq, "q.weight", []int{dp, d}}, {&p.head.Bq, "q.bias", []int{dp}}, {&p.head.Wk, "k.weight", []int{dp, d}}, {&p.head.Bk, "k.bias", []int{dp}}} {
		t, err := w.Lookup(s.name, s.shape...)
		if err != nil {
			return nil, fmt.Errorf("layers: pointer head: %w", err)
		}
		if *s.dst, err = b.FromFloat32(s.shape, t.Float32s()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Probabilities returns one question's option probabilities from final
// hidden states h [N, d]: decide indexes the <decide> row, opts the </opt>
// rows, in option order.
func (p *Pointer) Probabilities(h tensor.Tensor, decide int, opts []int) ([]float32, error) {
	return p.b.Pointer(h, &p.head, decide, opts)
}

// ProbabilitiesBatch returns the option probabilities of several questions
// over the same hidden states h, in order: in one backend call when the
// backend implements tensor.Batched.
func (p *Pointer) ProbabilitiesBatch(h tensor.Tensor, qs []tensor.PointerQuery) ([][]float32, error) {
	if bb, ok := p.b.(tensor.Batched); ok {
		return bb.Pointers(h, &p.head, qs)
	}
	out := make([][]float32, len(qs))
	for i, q := range qs {
		var err error
		if out[i], err = p.b.Pointer(h, &p.head, q.Decide, q.Opts); err != nil {
			return nil, err
		}
	}
	return out, nil
}
