//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// deltaTCOn routes GatedDeltaRuleSegments through the tensor-core chunked kernels (deltaTC) where they take the
// shape; false keeps the register kernels. Benchmarks flip it to time both.
var deltaTCOn = true

// errDeltaTCShape is returned (wrapped) by Queue.deltaTC for shapes its kernels do not take: d_k other than 64 or
// 128, d_v not a multiple of 32, or a device with too little shared memory per block. The caller then keeps the
// register kernels.
var errDeltaTCShape = errors.New("shape not supported by the tensor-core delta rule")

// deltaTCShared is the dynamic shared memory of deltatc_dkD_cwW (kernels/deltatc.cu): q̂ and k̂ [64][D+4], v/R
// [64][W+8] (and U [64][W+8] when it does not fit over q̂), A, M, T [64][68], a 16×52 solve scratch, the state
// columns [D][W+8] and four 64-entry vectors, fp32.
func deltaTCShared(dk, cw int) int {
	u := 0
	if cw+8 > dk+4 {
		u = 64 * (cw + 8)
	}
	return 4 * (2*64*(dk+4) + 64*(cw+8) + u + 3*64*68 + 16*52 + dk*(cw+8) + 4*64)
}

// deltaTCWidth returns the value columns per block of the tensor-core delta rule: 64 when d_v allows it and the
// launch still has two blocks per multiprocessor, else 32 (more blocks for few segments: a long prefill has one
// segment, so its parallelism is heads × column slices).
func (d *Device) deltaTCWidth(segs, hv, dv int) int {
	if dv%64 == 0 && segs*hv*(dv/64) >= 2*d.sms() {
		return 64
	}
	return 32
}

// deltaTC enqueues the gated delta rule in its chunked (WY/UT) form on tensor cores over segs segments described
// by the device array desc (segDesc, as GatedDeltaRuleSegments builds them: rows start … start+len−1, initial state
// a of type dt or null for zero, final state b fp32 [hv, dk, dv] or null for not stored). o [N, hv·dv] and qkv
// [N, 2·hk·dk + hv·dv] = [Q | K | V], g and beta [N, hv], any storage type; n is N, for the size checks. Initial
// states are only read. It needs no temporary memory: each block keeps its state columns in shared memory
// (deltaTCShared, about 176 KiB at d_k = 128) and runs its segment's 64-token chunks in order; products are TF32
// with fp32 accumulation (relative error ~1e-3 of the output's RMS, see deltatc_test.go). Shapes the kernels do
// not take return an error wrapping errDeltaTCShape, before anything is enqueued.
func (q *Queue) deltaTC(o, qkv, g, beta Operand, desc Buffer, segs, n, hk, hv, dk, dv int) error {
	const op = "deltaTC"
	if err := positive(op, "segs, N, hk, hv, dk, dv", segs, n, hk, hv, dk, dv); err != nil {
		return err
	}
	if hv%hk != 0 {
		return &ArgError{op, "hv", fmt.Sprintf("%d is not a multiple of hk = %d", hv, hk)}
	}
	if segs > 65535 {
		return &ArgError{op, "segs", fmt.Sprintf("%d segments, at most 65535 per launch", segs)}
	}
	if dk != 64 && dk != 128 {
		return fmt.Errorf("cuda: %s: d_k = %d: %w (d_k must be 64 or 128)", op, dk, errDeltaTCShape)
	}
	if dv%32 != 0 {
		return fmt.Errorf("cuda: %s: d_v = %d: %w (d_v must be a multiple of 32)", op, dv, errDeltaTCShape)
	}
	cw := q.d.deltaTCWidth(segs, hv, dv)
	if cw == 64 && deltaTCShared(dk, 64) > q.d.info.SharedOptin {
		cw = 32 // e.g. A100: 163 KiB per block
	}
	shared := deltaTCShared(dk, cw)
	if lim := q.d.info.SharedOptin; shared > lim {
		return fmt.Errorf("cuda: %s: %d bytes of shared memory, the device allows %d: %w", op, shared, lim, errDeltaTCShape)
	}
	width := int64(2*hk*dk + hv*dv)
	gn := int64(n) * int64(hv)
	if err := needAll(op, operand{"o", o, int64(n) * int64(hv*dv), false}, operand{"qkv", qkv, int64(n) * width, false},
		operand{"g", g, gn, false}, operand{"beta", beta, gn, false},
		operand{"desc", Operand{desc, tensor.F32}, int64(segs) * int64(len(segDesc{})), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(o).put(qkv).put(g).put(beta)
	q.args.Ptr(desc.Ptr).I32(int32(hk)).I32(int32(hv)).I32(int32(dv))
	grid := cudrv.Dim3{X: dv / cw, Y: hv, Z: segs}
	return q.launch("deltatc", fmt.Sprintf("deltatc_dk%d_cw%d", dk, cw), grid, cudrv.Dim3{X: 256, Y: 1, Z: 1}, shared)
}
