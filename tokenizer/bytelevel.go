package tokenizer

// byteRune is GPT-2's reversible byte-to-character table, used by the
// ByteLevel pre-tokenizer and decoder: printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards, in byte order.
var byteRune [256]rune

// runeByte inverts byteRune: runeByte[r] is the byte r stands for, or -1.
var runeByte [324]int16

func init() {
	for i := range runeByte {
		runeByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = 256 + n
			n++
		}
		runeByte[byteRune[b]] = int16(b)
	}
}

// byteLevelDecode maps a byte-level token string back to raw bytes. ok is
// false when some character of s is outside the byte alphabet; the decoder
// then uses s's own UTF-8 bytes, as Hugging Face's ByteLevel decoder does.
func byteLevelDecode(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeByte) || runeByte[r] < 0 {
			return nil, false
		}
		b = append(b, byte(runeByte[r]))
	}
	return b, true
}
