package hub

// KevPatterns are the file patterns Kev downloads from a Hub snapshot.
var KevPatterns = []string{"*.json", "*.safetensors", "*.pt", "*.txt", "*.jinja"}

// MatchAny reports whether name matches one of patterns.
func MatchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Match reports whether name matches the shell pattern, with the semantics of
// Python's fnmatch as huggingface_hub applies it to repository paths: '*'
// matches any run of characters including '/', '?' any one character, and
// '[...]' / '[!...]' a set of characters with ranges. A pattern ending in '/'
// matches everything below that folder. A malformed set matches its '['
// literally, as in Python.
func Match(pattern, name string) bool {
	if n := len(pattern); n > 0 && pattern[n-1] == '/' {
		pattern += "*"
	}
	return match([]byte(pattern), []byte(name))
}

func match(p, s []byte) bool {
	// Iterative matcher with single backtrack point for '*'.
	px, sx := 0, 0
	starP, starS := -1, -1
	for sx < len(s) {
		if px < len(p) {
			switch p[px] {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				px++
				sx++
				continue
			case '[':
				if ok, width, valid := matchSet(p[px:], s[sx]); valid {
					if ok {
						px += width
						sx++
						continue
					}
				} else if s[sx] == '[' {
					px++
					sx++
					continue
				}
			default:
				if p[px] == s[sx] {
					px++
					sx++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		px, sx = starP+1, starS
	}
	for px < len(p) && p[px] == '*' {
		px++
	}
	return px == len(p)
}

// matchSet matches c against the set that starts p ("[...]"). It returns
// whether c is in the set, the width of the set in p, and whether p starts a
// well-formed set at all.
func matchSet(p []byte, c byte) (ok bool, width int, valid bool) {
	i := 1
	negate := false
	if i < len(p) && p[i] == '!' {
		negate = true
		i++
	}
	// A ']' right after '[' or '[!' is a literal member.
	start := i
	for i < len(p) && (p[i] != ']' || i == start) {
		i++
	}
	if i >= len(p) {
		return false, 0, false
	}
	set := p[start:i]
	in := false
	for j := 0; j < len(set); j++ {
		if j+2 < len(set) && set[j+1] == '-' {
			if set[j] <= c && c <= set[j+2] {
				in = true
			}
			j += 2
			continue
		}
		if set[j] == c {
			in = true
		}
	}
	return in != negate, i + 1, true
}
