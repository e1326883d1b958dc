package cpu

import "golang.org/x/sys/cpu"

// hasAMX reports whether the processor has AMX tiles with bf16 products and
// the OS lets this process use them (amxPermit).
var hasAMX = cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && amxPermit()

// amxBF16x32 sets the 32×32 float32 block c (row stride 32) to the bf16
// products of 32 rows of x (bf16 pairs, row stride lda bytes) against the
// panel w, over kt steps of 32 K elements (amx_amd64.s).
//
//go:noescape
func amxBF16x32(cfg *byte, a *uint32, lda int, w *uint32, kt int, c *float32)
