//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// The chunked delta rule on tensor cores (kernels/gdn.cu): for d_k = 128, value widths that are a multiple of 32
// and bf16 input rows, segments run as a parallel precompute over (64-token chunk, value head) — T = (I + A)⁻¹
// and the intra-chunk attention M in a workspace — then one sequential pass per (32 value columns, value head,
// segment) with mma.sync bf16 products. Other shapes and segments shorter than gdnMinLen keep the register
// kernels of delta.go. The choice is made per segment from its own length, so a segment's result never depends
// on the segments it is batched with.

// gdnOn selects the tensor-core kernels for the segments they take; false keeps the register kernels for every
// segment (tests and benchmarks compare the two).
var gdnOn = true

// gdnMinLen is the shortest segment the tensor-core kernels take; shorter ones (and empty ones) run on the
// register kernels. The choice depends on the segment alone, never on its batch-mates.
var gdnMinLen = 1

// gdnTakes reports whether a segment of n tokens runs on the tensor-core kernels (when the call's shape allows).
func gdnTakes(n int) bool { return n > 0 && n >= gdnMinLen }

// gdnWork is the workspace per (chunk, value head): T and M as bf16 [64][64], five fp32 [64] row factors.
const gdnWork = 17664

// gdnPrepShared is gdn_prep's dynamic shared memory: q, k [64][136] bf16; A, T [64][68] fp32; three 16×20 blocks;
// four 64-vectors.
const gdnPrepShared = 2*64*136*2 + 2*64*68*4 + 3*16*20*4 + 4*64*4

// gdnStateShared is gdn_state_ns{1,2}'s dynamic shared memory for ns stages of chunk inputs.
func gdnStateShared(ns int) int {
	const stage = 2*64*136*2 + 64*40*2 + 2*64*72*2 + 5*64*4
	return ns*stage + 2*128*40*2 + 3*64*40*2
}

// gdnFits reports whether the tensor-core kernels take a call of this shape and input: d_k = 128, d_v a multiple
// of 32, 16-byte aligned bf16 rows, and enough opt-in shared memory for one stage.
func (d *Device) gdnFits(dk, dv int, x Operand, width int) bool {
	return gdnOn && dk == 128 && dv%32 == 0 && x.DType == tensor.BF16 && width%8 == 0 && x.Ptr%16 == 0 &&
		d.info.Major >= 8 && d.info.SharedOptin >= gdnStateShared(1)
}

// gdnChunks appends the 64-token chunks of a segment of n rows starting at row start to tab (first row, length)
// and returns the new table and the index of the segment's first chunk.
func gdnChunks(tab []int32, start, n int) ([]int32, int32) {
	first := int32(len(tab) / 2)
	for c := 0; c < n; c += 64 {
		tab = append(tab, int32(start+c), int32(min(64, n-c)))
	}
	return tab, first
}

// gdnPrep enqueues gdn_prep over nc chunks (chunks: int32 [nc][2] on the device) into work (nc·hv·gdnWork bytes).
func (q *Queue) gdnPrep(qkv, g, beta Operand, chunks, work Buffer, nc, hk, hv, dv int) error {
	q.args.Reset()
	q.args.Ptr(qkv.Ptr)
	q.put(g).put(beta)
	q.args.Ptr(chunks.Ptr).I32(int32(hk)).I32(int32(hv)).I32(int32(dv)).Ptr(work.Ptr)
	return q.launch("gdn", "gdn_prep", cudrv.Dim3{X: nc, Y: hv, Z: 1}, block256, gdnPrepShared)
}

// gdnState enqueues gdn_state over segs segments (desc: SegDesc [segs], every length > 0; base: int32 [segs], each
// segment's first chunk in work). Launches of at most one block per multiprocessor load the next chunk while one
// runs (one block per multiprocessor, ns2); larger ones run two blocks per multiprocessor (ns1). Both compute the
// same bits.
func (q *Queue) gdnState(o, qkv Operand, desc, base, work Buffer, segs, hk, hv, dv int) error {
	q.args.Reset()
	q.put(o)
	q.args.Ptr(qkv.Ptr).Ptr(desc.Ptr).Ptr(base.Ptr).I32(int32(hk)).I32(int32(hv)).I32(int32(dv)).Ptr(work.Ptr)
	blocks := segs * hv * dv / 32
	name, ns := "gdn_state_ns1", 1
	if blocks <= q.d.info.SMs && q.d.info.SharedOptin >= gdnStateShared(2) {
		name, ns = "gdn_state_ns2", 2
	}
	return q.launch("gdn", name, cudrv.Dim3{X: dv / 32, Y: hv, Z: segs}, block256, gdnStateShared(ns))
}

// deltaLong enqueues the segments of a (starts, ls) that the tensor-core kernels take (gdn.go) and returns the
// others, for the register kernels.
func (s *scope) deltaLong(a DeltaRule, starts, ls []int32, width int) ([]int32, []int32, error) {
	if !s.b.dev.gdnFits(a.DK, a.DV, a.QKV, width) {
		return starts, ls, nil
	}
	var tab, lb, ss, sl []int32
	var long []segDesc
	for i := range starts {
		if !gdnTakes(int(ls[i])) {
			ss, sl = append(ss, starts[i]), append(sl, ls[i])
			continue
		}
		var first int32
		tab, first = gdnChunks(tab, int(starts[i]), int(ls[i]))
		var d segDesc
		d.set(int(starts[i]), int(ls[i]), 0, a.S0.DType, 0, tensor.F32, a.S0.Ptr, a.Final.Ptr)
		long, lb = append(long, d), append(lb, first)
	}
	if len(long) == 0 {
		return starts, ls, nil
	}
	all := append(append(flat(long), tab...), lb...) // one upload: descriptors (8-byte aligned), chunks, first chunks
	tb, err := s.ints(all)
	if err != nil {
		return nil, nil, err
	}
	at := func(k int) Buffer { return Buffer{Ptr: tb.Ptr + cu.DevicePtr(4*k), Bytes: tb.Bytes - 4*int64(k)} }
	nc := len(tab) / 2
	work, err := s.temp(int64(nc) * int64(a.HV) * gdnWork)
	if err != nil {
		return nil, nil, err
	}
	if err := s.q.gdnPrep(a.QKV, a.G, a.Beta, at(10*len(long)), work, nc, a.HK, a.HV, a.DV); err != nil {
		return nil, nil, err
	}
	return ss, sl, s.q.gdnState(a.O, a.QKV, at(0), at(10*len(long)+len(tab)), work, len(long), a.HK, a.HV, a.DV)
}
