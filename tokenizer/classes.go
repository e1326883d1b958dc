package tokenizer

import (
	"sync"
	"unicode"
)

// Character classes used by the split scanner, as bits.
const (
	clL  uint8 = 1 << iota // \p{L}
	clM                    // \p{M}
	clN                    // \p{N}
	clWS                   // \s as Oniguruma defines it for Unicode: White_Space
	clNL                   // \r or \n
)

var (
	bmpOnce  sync.Once
	bmpClass []uint8 // class bits for every rune below 0x10000
)

func classOfSlow(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c |= clL
	case unicode.IsMark(r):
		c |= clM
	case unicode.IsNumber(r):
		c |= clN
	}
	// Oniguruma's \s for Unicode is 0009-000D, 0085 and the separators
	// Zs, Zl, Zp, which is exactly the White_Space property.
	if unicode.Is(unicode.White_Space, r) {
		c |= clWS
	}
	if r == '\r' || r == '\n' {
		c |= clNL
	}
	return c
}

func buildBMP() {
	t := make([]uint8, 0x10000)
	for r := range t {
		t[r] = classOfSlow(rune(r))
	}
	bmpClass = t
}

// classOf returns the class bits of r.
func classOf(r rune) uint8 {
	if r < 0x10000 {
		return bmpClass[r]
	}
	return classOfSlow(r)
}
