package systemone

import (
	"strings"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/pyjson"
)

// MaxTokenBytes is the most bytes one token of Qwen's tokenizers stands for (a run of 128 spaces): a text of more
// than n·MaxTokenBytes bytes has more than n tokens. The render budgets below rest on it.
const MaxTokenBytes = 128

// Render budgets (RecordOptions): a text rendered past its budget is certainly over its token limit, so rendering
// stops there, however large the JSON would render.
const (
	// DefaultMaxStateBytes is the state's render budget: MaxStateTokens tokens of MaxTokenBytes (8 MiB), or, for a
	// state whose own text is larger, stateSpread times that text up to MaxStateSpreadBytes (see stateBudget).
	DefaultMaxStateBytes = MaxStateTokens * MaxTokenBytes
	// MaxStateSpreadBytes bounds the render budget of a large state (32 MiB: the HTTP server's largest body).
	MaxStateSpreadBytes = 32 << 20
	// DefaultMaxQuestionBytes is one question's render budget (its instructions and options together):
	// MaxRowTokens tokens of MaxTokenBytes (9 MiB).
	DefaultMaxQuestionBytes = MaxRowTokens * MaxTokenBytes
	// DefaultMaxRenderBytes bounds the text one request renders in all, questions included (64 MiB). Kev has no
	// such bound; it is this server's, like a limit on questions, for a request of many questions each within the
	// row limit.
	DefaultMaxRenderBytes = 64 << 20
)

// Render returns the text the model reads for JSON content, exactly as Kev renders it:
//
//   - null is ""; a string is itself; numbers and booleans are Python's str() ("1.5", "100.0", "True", every digit
//     of an integer);
//   - an array is one line per element, "- " + the element's text with its leading whitespace stripped;
//   - an object is one line per member, "key: value" for scalars and "key:" + newline + the nested text for arrays
//     and objects; nested lines are indented two spaces per level;
//   - empty arrays and objects are "", so {"k": []} is "k:\n" and {"k": null} is "k: ".
//
// Multi-line strings are not re-indented and newlines are not normalised. The text is written once, in order:
// nesting never copies a child's text, so rendering costs the size of its result.
func Render(v pyjson.Value) string {
	s, _ := RenderLimit(v, -1)
	return s
}

// RenderLimit is Render with a budget: it stops once the text passes max bytes (max < 0: no budget) and returns
// the first max bytes with over true, having done work and taken memory for no more than that.
func RenderLimit(v pyjson.Value, max int) (text string, over bool) {
	switch {
	case v.IsNull():
		return "", false
	case !v.IsContainer(): // a scalar's text is itself: no copy
		s := v.Str()
		if max >= 0 && len(s) > max {
			return s[:max], true
		}
		return s, false
	}
	r := renderer{limit: max}
	r.value(v, 0)
	return r.String(), r.over
}

// renderChunk is the size of the renderer's buffers: the text is written into chunks of this size, each
// allocated once, and copied once into the result, so rendering n bytes allocates about 2n.
const renderChunk = 64 << 10

// renderer writes Kev's rendering of a value into one buffer, up to a limit.
type renderer struct {
	full  [][]byte // filled chunks
	cur   []byte   // the chunk being filled
	n     int      // bytes written
	limit int      // < 0: none
	over  bool     // the text passed limit; nothing more is written
	strip bool     // drop the leading whitespace of what is written next (Python's lstrip of an element's text)
}

// write appends s, dropping its leading whitespace while strip holds.
func (r *renderer) write(s string) {
	if r.over {
		return
	}
	if r.strip {
		s = lstrip(s)
		if s == "" {
			return
		}
		r.strip = false
	}
	if r.limit >= 0 && r.n+len(s) > r.limit {
		s = s[:r.limit-r.n]
		r.over = true
	}
	r.n += len(s)
	for len(s) > 0 {
		if len(r.cur) == cap(r.cur) {
			if r.cur != nil {
				r.full = append(r.full, r.cur)
			}
			r.cur = make([]byte, 0, renderChunk)
		}
		k := copy(r.cur[len(r.cur):cap(r.cur)], s)
		r.cur = r.cur[:len(r.cur)+k]
		s = s[k:]
	}
}

// String returns the text written.
func (r *renderer) String() string {
	if len(r.full) == 0 {
		return string(r.cur)
	}
	var sb strings.Builder
	sb.Grow(r.n)
	for _, c := range r.full {
		sb.Write(c)
	}
	sb.Write(r.cur)
	return sb.String()
}

// pad writes two spaces per level of indent.
func (r *renderer) pad(indent int) {
	const spaces = "                                                                " // 64
	for n := 2 * indent; n > 0 && !r.over; {
		k := min(n, len(spaces))
		r.write(spaces[:k])
		n -= k
	}
}

func (r *renderer) value(v pyjson.Value, indent int) {
	if r.over {
		return
	}
	switch v.Kind() {
	case pyjson.KindNull:
	case pyjson.KindArray:
		for i, x := range v.Elems() {
			if r.over {
				return
			}
			if i > 0 {
				r.write("\n")
			}
			r.pad(indent)
			r.write("- ")
			r.strip = true // lstrip(render(x, indent+1))
			r.value(x, indent+1)
			r.strip = false
		}
	case pyjson.KindObject:
		for i, m := range v.Members() {
			if r.over {
				return
			}
			if i > 0 {
				r.write("\n")
			}
			r.pad(indent)
			r.write(m.Key)
			if m.Value.IsContainer() {
				r.write(":\n")
				r.value(m.Value, indent+1)
			} else {
				r.write(": ")
				r.value(m.Value, 0)
			}
		}
	default:
		r.write(v.Str())
	}
}

// lstrip is Python's str.lstrip(): it drops leading characters for which str.isspace() is true.
func lstrip(s string) string {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if !isPySpace(r) {
			break
		}
		s = s[size:]
	}
	return s
}

// isPySpace is Python's str.isspace() for one character: bidirectional class WS, B or S, or category Zs.
func isPySpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0D, r >= 0x1C && r <= 0x20, r == 0x85, r == 0xA0, r == 0x1680,
		r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029, r == 0x202F, r == 0x205F, r == 0x3000:
		return true
	}
	return false
}

// OptionText returns the text of an option: its name alone when the description is null or the empty string,
// otherwise "name: " + Render(description) (so 0 gives "name: 0", false "name: False", [] "name: ").
func OptionText(name string, description pyjson.Value) string {
	if description.IsNull() || description.Kind() == pyjson.KindString && description.AsString() == "" {
		return name
	}
	return name + ": " + Render(description)
}

// Record is a request as the model sees it: the rendered state and, per question, the rendered instruction and
// option texts, with what is needed to map probabilities back to answers. The same record builds training data,
// so training and serving see byte-identical text.
type Record struct {
	State     string
	Questions []RecordQuestion

	// StateCut says the state rendered past its budget (RecordOptions.MaxStateBytes): State holds the first
	// StateBytes bytes of its text, and the state is over the token limit.
	StateCut   bool
	StateBytes int // the budget State was cut at, when StateCut

	shared *sharedState // the parts of one request: the state's ids made once
}

// RecordQuestion is one question of a Record.
type RecordQuestion struct {
	ID      string
	Type    QuestionType
	Instr   string        // Render(instructions)
	Options []string      // the option texts, in order
	Keys    []string      // the probability keys, in option order
	Legend  []LegendEntry // score only: the level texts under their keys

	// Cut says the question's texts rendered past their budget (RecordOptions.MaxQuestionBytes): the texts are
	// incomplete and the question's row is over the row limit.
	Cut      bool
	CutBytes int // the budget the texts passed, when Cut
}

// RecordOptions are the optional preprocessing steps of ToRecord, and its render budgets.
type RecordOptions struct {
	// DateFacts adds the day counts between the dates in the state (WithDateFacts), as a server started with
	// KEV_DATE_FACTS=1 does.
	DateFacts bool

	// MaxStateBytes is the state's render budget (0: DefaultMaxStateBytes, or stateSpread times the state's own
	// bytes up to MaxStateSpreadBytes where that is more; < 0: none): a state whose text passes it is over
	// MaxStateTokens whatever it says, so only that much is rendered and the record says StateCut.
	MaxStateBytes int
	// MaxQuestionBytes is one question's render budget, its instructions and option texts together (0:
	// DefaultMaxQuestionBytes, < 0: none); past it the question is marked Cut.
	MaxQuestionBytes int
	// MaxBytes bounds the text the whole request renders (0: DefaultMaxRenderBytes, < 0: none); past it ToRecord
	// returns a *RenderTooLargeError.
	MaxBytes int
}

// RenderTooLargeError refuses a request whose texts render to more than RecordOptions.MaxBytes in all (a request
// of many questions: each question alone is bounded by the row limit). Kev has no such limit.
type RenderTooLargeError struct {
	Limit int // bytes
}

// Error says what the limit is and what to do.
func (e *RenderTooLargeError) Error() string {
	return "the request renders to more than " + commaInt(e.Limit) +
		" bytes of text, over this server's limit: split its questions across requests"
}

// Detail returns the 422 detail: Error.
func (e *RenderTooLargeError) Detail() string { return e.Error() }

// stateSpread is how many times its own bytes (sourceBytes) a state may render to within its default budget: a
// document of text, lists and a few levels of objects renders to about its own size, so every such state is rendered
// whole and refused with Kev's own count of its tokens, while a state whose nesting multiplies its text (a render
// bomb: 990 levels around an array) is still cut where a small multiple of its size runs out.
const stateSpread = 4

// stateBudget returns the default render budget of state v: DefaultMaxStateBytes, or stateSpread times the state's
// own bytes where that is more, up to MaxStateSpreadBytes.
func stateBudget(v pyjson.Value) int {
	return max(DefaultMaxStateBytes, min(MaxStateSpreadBytes, stateSpread*sourceBytes(v, MaxStateSpreadBytes)))
}

// sourceBytes returns the bytes of v's keys and scalars' texts, with two for each member and element (the ": " or
// "- " and the line's end), stopping once the count passes limit.
func sourceBytes(v pyjson.Value, limit int) int {
	n := 0
	var walk func(v pyjson.Value)
	walk = func(v pyjson.Value) {
		if n > limit {
			return
		}
		switch v.Kind() {
		case pyjson.KindNull:
		case pyjson.KindArray:
			for _, x := range v.Elems() {
				n += 2
				walk(x)
			}
		case pyjson.KindObject:
			for _, m := range v.Members() {
				n += len(m.Key) + 2
				walk(m.Value)
			}
		default:
			n += len(v.Str())
		}
	}
	walk(v)
	return n
}

// budget returns o's budget b: def for 0, none (-1) for b < 0.
func budget(b, def int) int {
	switch {
	case b == 0:
		return def
	case b < 0:
		return -1
	}
	return b
}

// texts renders a request's texts against a per-text budget and a total: each call takes from both.
type texts struct {
	total int // bytes left in all; < 0: none
	over  bool
}

// render renders v within max bytes (< 0: none) and what is left of the total; over says the text passed max.
// Passing the total sets t.over.
func (t *texts) render(v pyjson.Value, max int) (string, bool) {
	lim, byTotal := max, false
	if t.total >= 0 && (lim < 0 || t.total < lim) {
		lim, byTotal = t.total, true
	}
	s, over := RenderLimit(v, lim)
	if t.total >= 0 {
		t.total -= len(s)
	}
	if over && byTotal {
		t.over = true
	}
	return s, over
}

// ToRecord validates the request and renders it: the state text, and per question its instruction and options.
// A noul's options are "no" and "yes" (with their "false"/"true" descriptions) under keys "false" and "true"; a
// choice's are its options in order under their names; a score's are its levels under "0", "1", ... with a legend.
// A question id over MaxQuestionIDBytes gets a *QuestionIDTooLongError. Texts are rendered within the budgets of
// opts: a state or question past its budget is marked (Encode then refuses it), and a request past the total gets a
// *RenderTooLargeError; none renders more than its budget.
func ToRecord(req *Request, opts RecordOptions) (*Record, error) {
	if err := checkIDs(req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	maxState := budget(opts.MaxStateBytes, DefaultMaxStateBytes)
	if opts.MaxStateBytes == 0 {
		maxState = req.shared.stateBudget(req.State)
	}
	maxQ := budget(opts.MaxQuestionBytes, DefaultMaxQuestionBytes)
	t := &texts{total: budget(opts.MaxBytes, DefaultMaxRenderBytes)}
	rec := &Record{Questions: make([]RecordQuestion, len(req.Questions)), shared: req.shared}
	rendered := false
	rec.State, rec.StateCut = req.shared.renderState(req.State, opts.DateFacts, maxState,
		func(v pyjson.Value) (string, bool) { rendered = true; return t.render(v, maxState) })
	if !rendered && t.total >= 0 { // rendered once for every part, but each part reads it
		t.total -= len(rec.State)
		t.over = t.over || t.total < 0
	}
	if rec.StateCut {
		rec.StateBytes = len(rec.State)
	}
	for i, e := range req.Questions {
		if t.over {
			break
		}
		q := e.Question
		rq := RecordQuestion{ID: e.ID, Type: q.Type}
		left := maxQ
		text := func(prefix string, v pyjson.Value) string {
			if rq.Cut {
				return ""
			}
			if left >= 0 {
				left -= len(prefix)
				if left < 0 {
					rq.Cut = true
					return ""
				}
			}
			s, over := t.render(v, left)
			if left >= 0 {
				left -= len(s)
			}
			rq.Cut = rq.Cut || over
			return prefix + s
		}
		rq.Instr = text("", q.Instructions)
		option := func(name string, description pyjson.Value) string {
			if description.IsNull() || description.Kind() == pyjson.KindString && description.AsString() == "" {
				return text(name, pyjson.Null())
			}
			return text(name+": ", description)
		}
		switch q.Type {
		case TypeNoul:
			rq.Options = []string{option("no", q.False), option("yes", q.True)}
			rq.Keys = []string{"false", "true"}
		case TypeChoice:
			for _, o := range q.Options {
				rq.Options = append(rq.Options, option(o.Name, o.Description))
				rq.Keys = append(rq.Keys, o.Name)
			}
		case TypeScore:
			for j, l := range q.Levels {
				text := text("", l)
				rq.Options = append(rq.Options, text)
				rq.Keys = append(rq.Keys, levelKey(j))
				rq.Legend = append(rq.Legend, LegendEntry{Key: levelKey(j), Text: text})
			}
		}
		if rq.Cut {
			rq.CutBytes = maxQ
		}
		rec.Questions[i] = rq
	}
	if t.over {
		return nil, &RenderTooLargeError{Limit: budget(opts.MaxBytes, DefaultMaxRenderBytes)}
	}
	return rec, nil
}
