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

// MaxName is the number of bytes of an untrusted name (a tensor, file or key
// name) an error message shows: names are meant to be read whole, but not a
// hostile megabyte of them.
const MaxName = 256

// Name quotes a name from an untrusted file as %q does when it is at most
// MaxName bytes long, else its first MaxName bytes and "…(N bytes)".
func Name(s string) string {
	if len(s) <= MaxName {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutRune(s, MaxName)) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// MaxMessage is the longest message Error passes on whole.
const MaxMessage = 256

// Error returns err's message cut to MaxMessage bytes with "…(N bytes)": for
// errors of other packages (encoding/json among them) that may quote the
// input they failed on.
func Error(err error) string {
	s := err.Error()
	if len(s) <= MaxMessage {
		return s
	}
	return cutRune(s, MaxMessage) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// Cut returns s when it is at most n bytes long, else its first n bytes (or
// fewer, not to cut a UTF-8 sequence) and "…(N bytes)": for free text from
// an untrusted source, such as a server's error message, shown unquoted.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutRune(s, n) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// cutRune returns s[:n] backed off to a rune start.
func cutRune(s string, n int) string {
	for k := 0; k < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); k++ {
		n--
	}
	return s[:n]
}

// prefix quotes head[:Max] backed off to a rune start, then the length n.
func prefix(head string, n int) string {
	return strconv.Quote(cutRune(head, Max)) + "…(" + strconv.Itoa(n) + " bytes)"
}
