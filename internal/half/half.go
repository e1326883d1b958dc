// Package half converts between float32 and the 16-bit float formats found in
// checkpoints: bfloat16 (ours, round to nearest even, NaN kept) and IEEE
// binary16 (through github.com/x448/float16).
package half

import (
	"math"

	"github.com/x448/float16"
)

// BF16FromF32 rounds f to the nearest bfloat16, ties to even. NaN stays NaN
// (quiet, sign kept) and infinities stay infinite.
func BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bfloat16 to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 returns f rounded to the nearest bfloat16 value, as a float32.
func RoundBF16(f float32) float32 { return BF16ToF32(BF16FromF32(f)) }

// F16ToF32 widens an IEEE binary16 value to float32 exactly.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// F16FromF32 rounds f to the nearest IEEE binary16 value, ties to even.
func F16FromF32(f float32) uint16 { return float16.Fromfloat32(f).Bits() }
