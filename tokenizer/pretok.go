package tokenizer

// splitBehavior is what a Split pre-tokenizer does with its matches.
type splitBehavior uint8

const (
	isolated splitBehavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]splitBehavior{
	"Isolated":           isolated,
	"Removed":            removed,
	"MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext":     mergedWithNext,
	"Contiguous":         contiguous,
}

// step is one pre-tokenizer: it splits s and calls emit with each non-empty
// piece in order.
type step interface {
	split(s string, emit func(string))
}

// scanStep is a Split with one of Qwen's patterns, Isolated, not inverted.
type scanStep struct{ q *qwenScanner }

func (st scanStep) split(s string, emit func(string)) {
	for i := 0; i < len(s); {
		e := st.q.next(s, i)
		emit(s[i:e])
		i = e
	}
}

// regexStep is a general Split pre-tokenizer.
type regexStep struct {
	re       *regexSplitter
	behavior splitBehavior
	invert   bool
}

type span struct {
	start, end int
	match      bool
}

func (st regexStep) split(s string, emit func(string)) {
	var spans []span
	last := 0
	st.re.find(s, func(start, end int) {
		if start > last {
			spans = append(spans, span{last, start, false})
		}
		spans = append(spans, span{start, end, true})
		last = end
	})
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	if st.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	switch st.behavior {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case mergedWithPrevious:
		prev := false
		for _, sp := range spans {
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	case mergedWithNext:
		prev := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prev := false
		for _, sp := range spans {
			if sp.match == prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prev = sp.match
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			emit(s[sp.start:sp.end])
		}
	}
}

// gpt2Pattern is the split ByteLevel applies when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelStep is the ByteLevel pre-tokenizer. The mapping of bytes to
// characters is implicit (BPE works on bytes); what remains is the optional
// leading space and the optional GPT-2 split.
type byteLevelStep struct {
	prefixSpace bool
	re          *regexSplitter // nil unless use_regex
}

func (st byteLevelStep) split(s string, emit func(string)) {
	if st.prefixSpace && (len(s) == 0 || s[0] != ' ') {
		s = " " + s
	}
	if st.re == nil {
		emit(s)
		return
	}
	last := 0
	st.re.find(s, func(start, end int) {
		if start > last {
			emit(s[last:start])
		}
		emit(s[start:end])
		last = end
	})
	if last < len(s) {
		emit(s[last:])
	}
}
