//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

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

	simple bool // tests: force the one-warp-per-row kernel attention_fwd
	splits int  // tests: key splits of the tiled kernel (0: choose)
}

// flashShared is the dynamic shared memory of flash_attn_dD: a 64-row query tile and two 32-row K and V tiles,
// rows padded by 8 elements.
func flashShared(d int) int { return (64 + 4*32) * (d + 8) * 2 }

// flashSplits chooses how many key ranges the tiled kernel splits each block's keys into: one unless the blocks
// would leave the GPU under-filled and there is a prefix of at least 8 key tiles to share out (at least 4 tiles
// per split, at most 16 splits).
func flashSplits(blocks, p, sms int) int {
	if sms <= 0 {
		sms = 132
	}
	tiles := (p + 31) / 32
	if tiles < 8 || blocks >= sms {
		return 1
	}
	return max(1, min((2*sms+blocks-1)/blocks, tiles/4, 16))
}

// Attention enqueues causal grouped-query attention with an fp32 online softmax: row t attends to the P prefix
// rows and to rows SegStart[t] … t; query head h reads key/value head h/(H/KV). SegStart must be non-decreasing
// (segments stacked in order). With bf16 Q, K, V (and prefix) and D ∈ {64, 128, 256} it runs the tiled tensor-core
// kernel flash_attn_dD (probabilities rounded to bf16 for P·V), splitting long prefixes over several blocks when
// the query rows are few (the split partials live in the device workspace, see ReserveWorkspace); otherwise one
// warp per (row, head) in fp32.
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
	fast := !a.simple && (a.D == 64 || a.D == 128 || a.D == 256) && a.Q.DType == tensor.BF16 && a.K.DType == tensor.BF16 &&
		a.V.DType == tensor.BF16 && (a.P == 0 || (a.KP.DType == tensor.BF16 && a.VP.DType == tensor.BF16))
	if fast {
		qb := (a.N + 63) / 64
		splits := a.splits
		if splits <= 0 {
			splits = flashSplits(qb*a.H, a.P, q.d.info.SMs)
		}
		var part, ml cu.DevicePtr
		if splits > 1 {
			pn := int64(splits) * int64(a.N) * int64(a.H) * int64(a.D) * 4
			if err := q.ReserveWorkspace(pn + int64(splits)*int64(a.N)*int64(a.H)*8); err != nil {
				return err
			}
			part, ml = q.d.ws.Ptr, q.d.ws.Ptr+cu.DevicePtr(pn)
		}
		log2e := float32(1.4426950408889634)
		q.args.Reset()
		q.put(a.O)
		q.args.Ptr(part).Ptr(ml).Ptr(a.Q.Ptr).Ptr(a.K.Ptr).Ptr(a.V.Ptr).Ptr(a.KP.Ptr).Ptr(a.VP.Ptr).Ptr(a.SegStart.Ptr)
		q.args.I32(int32(a.N)).I32(int32(a.P)).I32(int32(a.H)).I32(int32(a.KV)).F32(a.Scale * log2e).I32(int32(splits))
		name := fmt.Sprintf("flash_attn_d%d", a.D)
		if err := q.launch("flash", name, cudrv.Dim3{X: qb, Y: a.H, Z: splits}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, flashShared(a.D)); err != nil {
			return err
		}
		if splits == 1 {
			return nil
		}
		q.args.Reset()
		q.put(a.O)
		q.args.Ptr(part).Ptr(ml).I32(int32(a.N)).I32(int32(a.H)).I32(int32(a.D)).I32(int32(splits))
		return q.launch("flash", "attn_combine", cudrv.Dim3{X: a.N, Y: a.H, Z: 1}, cudrv.Dim3{X: 64, Y: 1, Z: 1}, 0)
	}
	q.args.Reset()
	q.put(a.O).put(a.Q).put(a.K).put(a.V).put(a.KP).put(a.VP)
	q.args.Ptr(a.SegStart.Ptr).I32(int32(a.N)).I32(int32(a.P)).I32(int32(a.H)).I32(int32(a.KV)).I32(int32(a.D)).F32(a.Scale)
	jobs := a.N * a.H
	return q.launch("attn", "attention_fwd", cudrv.Dim3{X: (jobs + 3) / 4, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
}
