//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// DeltaRule is the argument list of Queue.DeltaRule.
type DeltaRule struct {
	O        Operand // [N, HV·DV]
	Final    Buffer  // fp32 [HV, DK, DV], or a zero Buffer: not stored (several segments)
	QKV      Operand // [N, 2·HK·DK + HV·DV] = [Q | K | V]
	G, Beta  Operand // [N, HV]: log decay and write strength
	S0       Operand // [HV, DK, DV] initial state, or a zero Buffer: zero
	SegStart Buffer  // int32 [Segs]: first row of each segment
	SegLen   Buffer  // int32 [Segs]: rows of each segment
	Segs     int
	N        int
	HK, HV   int
	DK, DV   int

	simple bool // tests: force the one-warp kernel delta_rule_rec
	reg    bool // tests, benchmarks: force the register-state kernel delta_rule_reg_dk*
}

// deltaOne selects the one-pass register kernels (Sᵀk̂ and Sᵀq̂ from the old state, reduced together, the next
// token's k̂/q̂ read during this one's sums) for d_k ∈ {32, 64, 128}: delta_rule_one_dk* (two blocks per
// multiprocessor, for segments of at most one 64-token chunk: question rows) and delta_rule_long_dk* (one block
// per multiprocessor with the next chunk's loads in flight, for longer segments); false keeps the two-pass
// register kernels (delta_rule_reg_dk*). Benchmarks flip it to time both.
var deltaOne = true

// deltaShared is the dynamic shared memory of delta_rule_rec for key dimension dk.
func deltaShared(dk int) int { return (32*dk + 2*dk) * 4 }

// deltaRegShared is the dynamic shared memory of the register kernels for key dimension dk: q̂ and k̂ of a
// 64-token chunk, v and o tiles of 64×32, three 64-entry vectors.
func deltaRegShared(dk int) int { return (2*64*dk + 2*64*32 + 3*64) * 4 }

// deltaKernel returns the register kernel family ("one", "long" or "reg") and its dynamic shared memory for key
// dimension dk, one of 32, 64, 128, for segments of at most maxLen tokens; forceReg keeps the two-pass kernel.
func (d *Device) deltaKernel(dk, maxLen int, forceReg bool) (string, int) {
	switch {
	case forceReg || !deltaOne:
		return "reg", deltaRegShared(dk)
	case maxLen <= 64:
		return "one", deltaRegShared(dk)
	}
	return "long", deltaRegShared(dk)
}

// DeltaRule enqueues the recurrent gated delta rule (see tensor.Backend.GatedDeltaRule), every segment starting
// from S0, which is only read. For DK ∈ {32, 64, 128} the state lives in registers, 8 warps per (32 value
// columns, value head, segment), one token after another (delta_rule_one_dk*, delta_rule_long_dk*); other sizes run one warp per
// (32 columns, head, segment) with the state in shared memory.
func (q *Queue) DeltaRule(a DeltaRule) error {
	const op = "DeltaRule"
	if err := positive(op, "Segs, N, HK, HV, DK, DV", a.Segs, a.N, a.HK, a.HV, a.DK, a.DV); err != nil {
		return err
	}
	if a.HV%a.HK != 0 {
		return &ArgError{op, "HV", fmt.Sprintf("%d is not a multiple of HK = %d", a.HV, a.HK)}
	}
	shared := deltaShared(a.DK)
	if lim := max(48<<10, q.d.info.SharedOptin); shared > lim {
		return &ArgError{op, "DK", fmt.Sprintf("%d needs %d bytes of shared memory, the device allows %d", a.DK, shared, lim)}
	}
	width := int64(2*a.HK*a.DK + a.HV*a.DV)
	sn := int64(a.HV) * int64(a.DK) * int64(a.DV)
	gn := int64(a.N) * int64(a.HV)
	if err := needAll(op, operand{"O", a.O, int64(a.N) * int64(a.HV*a.DV), false},
		operand{"Final", Operand{a.Final, tensor.F32}, sn, true}, operand{"QKV", a.QKV, int64(a.N) * width, false},
		operand{"G", a.G, gn, false}, operand{"Beta", a.Beta, gn, false}, operand{"S0", a.S0, sn, true},
		operand{"SegStart", Operand{a.SegStart, tensor.F32}, int64(a.Segs), false},
		operand{"SegLen", Operand{a.SegLen, tensor.F32}, int64(a.Segs), false}); err != nil {
		return err
	}
	if (a.DK == 32 || a.DK == 64 || a.DK == 128) && !a.simple {
		vec := a.QKV.DType == tensor.BF16 && width%8 == 0 && a.QKV.Ptr%16 == 0
		q.args.Reset()
		q.put(a.O)
		q.args.Ptr(a.Final.Ptr)
		q.put(a.QKV).put(a.G).put(a.Beta).put(a.S0)
		q.args.Ptr(a.SegStart.Ptr).Ptr(a.SegLen.Ptr).I32(int32(a.HK)).I32(int32(a.HV)).I32(int32(a.DV)).I32(b2i(vec))
		grid := cudrv.Dim3{X: (a.DV + 31) / 32, Y: a.HV, Z: a.Segs}
		kind, sh := q.d.deltaKernel(a.DK, (a.N+a.Segs-1)/a.Segs, a.reg) // segment lengths are on the device: their mean
		return q.launch("delta", fmt.Sprintf("delta_rule_%s_dk%d", kind, a.DK), grid, cudrv.Dim3{X: 256, Y: 1, Z: 1}, sh)
	}
	q.args.Reset()
	q.put(a.O)
	q.args.Ptr(a.Final.Ptr)
	q.put(a.QKV).put(a.G).put(a.Beta).put(a.S0)
	q.args.Ptr(a.SegStart.Ptr).Ptr(a.SegLen.Ptr).I32(int32(a.HK)).I32(int32(a.HV)).I32(int32(a.DK)).I32(int32(a.DV))
	grid := cudrv.Dim3{X: (a.DV + 31) / 32, Y: a.HV, Z: a.Segs}
	return q.launch("delta", "delta_rule_rec", grid, cudrv.Dim3{X: 32, Y: 1, Z: 1}, shared)
}
