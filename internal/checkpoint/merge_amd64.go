package checkpoint

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/kevgo/kev/internal/half"
)

// useAVX2 selects the AVX2/FMA merge kernel.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// mergeAcc32 is in merge_amd64.s.
//
//go:noescape
func mergeAcc32(dst *float32, a *float64, b *float64, n int, r int, lda int)

// loraAcc sets acc[i] = Σ_k b[k]·a[k·in+i] for every column, in k order with an fp32 rounding after each fused
// step (see merge.run): thirty-two columns at a time with AVX2 and FMA where the CPU has them, bit for bit the same as
// loraAccGo.
func loraAcc(acc []float32, a []float64, b []float64, in int) {
	nv := 0
	if useAVX2 && len(b) > 0 {
		nv = in &^ 31
		if nv > 0 {
			mergeAcc32(&acc[0], &a[0], &b[0], nv, len(b), in)
		}
	}
	loraAccGo(acc, a, b, in, nv)
}

// mergeOutBF16 is in merge_amd64.s.
//
//go:noescape
func mergeOutBF16(dst *uint16, w *uint16, acc *float32, s float32, n int)

// mergeRowBF16 sets dst[i] = bf16(w[i] + acc[i]·s) for a bf16 weight row w (little-endian bytes), as merge.run
// does for bf16 weights and output, with AVX2 where the CPU has it; ok is false (nothing done) without it.
func mergeRowBF16(dst []uint16, w []byte, acc []float32, s float32) (ok bool) {
	if !useAVX2 {
		return false
	}
	n := len(dst)
	nv := n &^ 7
	if nv > 0 {
		mergeOutBF16(&dst[0], (*uint16)(unsafe.Pointer(&w[0])), &acc[0], s, nv)
	}
	for i := nv; i < n; i++ {
		wi := half.BF16ToF32(uint16(w[2*i]) | uint16(w[2*i+1])<<8)
		dst[i] = half.BF16FromF32(wi + float32(acc[i]*s))
	}
	return true
}
