//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// MaxAttentionHeadDim is the largest head dimension Queue.Attention supports.
const MaxAttentionHeadDim = 256

// Attention is the argument list of Queue.Attention.
type Attention struct {
	O, Q, K, V Operand // [N, H·D], [N, H·D], [N, KV·D], [N, KV·D]
	KP, VP     Operand // cached prefix [P, KV·D]; zero Buffers when P = 0
	SegStart   Buffer  // int32 [N]: the first row of each row's segment
	N, P       int
	H, KV, D   int
	Scale      float32
}

// Attention enqueues causal grouped-query attention with an fp32 online softmax: row t attends to the P prefix
// rows and to rows SegStart[t] … t; query head h reads key/value head h/(H/KV).
func (q *Queue) Attention(a Attention) error {
	const op = "Attention"
	if err := positive(op, "N, H, KV, D", a.N, a.H, a.KV, a.D); err != nil {
		return err
	}
	if a.H%a.KV != 0 || a.D > MaxAttentionHeadDim || a.P < 0 {
		return &ArgError{op, "H, KV, D, P", fmt.Sprintf("%d, %d, %d, %d: need KV | H, D ≤ %d, P ≥ 0", a.H, a.KV, a.D, a.P, MaxAttentionHeadDim)}
	}
	qn, kn, pn := int64(a.N)*int64(a.H*a.D), int64(a.N)*int64(a.KV*a.D), int64(a.P)*int64(a.KV*a.D)
	if err := needAll(op, operand{"O", a.O, qn, false}, operand{"Q", a.Q, qn, false}, operand{"K", a.K, kn, false},
		operand{"V", a.V, kn, false}, operand{"KP", a.KP, pn, a.P == 0}, operand{"VP", a.VP, pn, a.P == 0},
		operand{"SegStart", Operand{a.SegStart, tensor.F32}, int64(a.N), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(a.O).put(a.Q).put(a.K).put(a.V).put(a.KP).put(a.VP)
	q.args.Ptr(a.SegStart.Ptr).I32(int32(a.N)).I32(int32(a.P)).I32(int32(a.H)).I32(int32(a.KV)).I32(int32(a.D)).F32(a.Scale)
	jobs := a.N * a.H
	return q.launch("attn", "attention_fwd", cudrv.Dim3{X: (jobs + 3) / 4, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
}
