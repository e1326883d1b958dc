package systemone

import (
	"strings"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/pyjson"
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
// Multi-line strings are not re-indented and newlines are not normalised.
func Render(v pyjson.Value) string {
	return render(v, 0)
}

func render(v pyjson.Value, indent int) string {
	switch v.Kind() {
	case pyjson.KindNull:
		return ""
	case pyjson.KindArray:
		pad := strings.Repeat("  ", indent)
		var sb strings.Builder
		for i, x := range v.Elems() {
			if i > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(pad)
			sb.WriteString("- ")
			sb.WriteString(lstrip(render(x, indent+1)))
		}
		return sb.String()
	case pyjson.KindObject:
		pad := strings.Repeat("  ", indent)
		var sb strings.Builder
		for i, m := range v.Members() {
			if i > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(pad)
			sb.WriteString(m.Key)
			if m.Value.IsContainer() {
				sb.WriteString(":\n")
				sb.WriteString(render(m.Value, indent+1))
			} else {
				sb.WriteString(": ")
				sb.WriteString(render(m.Value, 0))
			}
		}
		return sb.String()
	}
	return v.Str()
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
}

// RecordQuestion is one question of a Record.
type RecordQuestion struct {
	ID      string
	Type    QuestionType
	Instr   string        // Render(instructions)
	Options []string      // the option texts, in order
	Keys    []string      // the probability keys, in option order
	Legend  []LegendEntry // score only: the level texts under their keys
}

// RecordOptions are the optional preprocessing steps of ToRecord.
type RecordOptions struct {
	// DateFacts adds the day counts between the dates in the state (WithDateFacts), as a server started with
	// KEV_DATE_FACTS=1 does.
	DateFacts bool
}

// ToRecord validates the request and renders it: the state text, and per question its instruction and options.
// A noul's options are "no" and "yes" (with their "false"/"true" descriptions) under keys "false" and "true"; a
// choice's are its options in order under their names; a score's are its levels under "0", "1", ... with a legend.
func ToRecord(req *Request, opts RecordOptions) (*Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	state := req.State
	if opts.DateFacts {
		state = WithDateFacts(state)
	}
	rec := &Record{State: Render(state), Questions: make([]RecordQuestion, len(req.Questions))}
	for i, e := range req.Questions {
		q := e.Question
		rq := RecordQuestion{ID: e.ID, Type: q.Type, Instr: Render(q.Instructions)}
		switch q.Type {
		case TypeNoul:
			rq.Options = []string{OptionText("no", q.False), OptionText("yes", q.True)}
			rq.Keys = []string{"false", "true"}
		case TypeChoice:
			for _, o := range q.Options {
				rq.Options = append(rq.Options, OptionText(o.Name, o.Description))
				rq.Keys = append(rq.Keys, o.Name)
			}
		case TypeScore:
			for j, l := range q.Levels {
				text := Render(l)
				rq.Options = append(rq.Options, text)
				rq.Keys = append(rq.Keys, levelKey(j))
				rq.Legend = append(rq.Legend, LegendEntry{Key: levelKey(j), Text: text})
			}
		}
		rec.Questions[i] = rq
	}
	return rec, nil
}
