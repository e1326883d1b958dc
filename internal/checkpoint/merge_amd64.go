package checkpoint

import "golang.org/x/sys/cpu"

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
