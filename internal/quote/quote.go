// Package quote formats untrusted bytes for error messages: at most a short,
// quoted prefix, so that a hostile file or server answer cannot make an error
// message (and every log line that carries it) as large as itself.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Max is the number of bytes of untrusted input an error message shows.
const Max = 64

// String returns s quoted as %q does when it is at most Max bytes long, else
// its first Max bytes (or fewer, not to cut a UTF-8 sequence) quoted and
// followed by "…(N bytes)", N being len(s).
func String(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	return prefix(s[:Max+1], len(s))
}

// Bytes is String for a byte slice.
func Bytes(b []byte) string {
	if len(b) <= Max {
		return strconv.Quote(string(b))
	}
	return prefix(string(b[:Max+1]), len(b))
}

// prefix quotes head[:Max] backed off to a rune start, then the length n.
func prefix(head string, n int) string {
	cut := Max
	for k := 0; k < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(head[cut]); k++ {
		cut--
	}
	return strconv.Quote(head[:cut]) + "…(" + strconv.Itoa(n) + " bytes)"
}
