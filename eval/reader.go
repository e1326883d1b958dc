package eval

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/pyjson"
)

// Example is one labelled request of the input.
type Example struct {
	Line    int          // 1-based line number in the input
	Request *kev.Request // the System One request, validated
	// Expected maps a question id to the expected class's index among the question's classes (Keys): a noul's
	// false 0 and true 1, a choice's option in criteria order, a score's level. Questions without an expected
	// answer are asked but not scored.
	Expected map[string]int
}

// LineError reports a line of the input that cannot be read: its 1-based number, the field at fault as a dotted
// path ("" for the whole line), and the cause, which unwraps (a *kev.ValidationError for a request that Kev's
// server would refuse).
type LineError struct {
	Line  int
	Field string
	Err   error
}

// Error names the line, the field and the cause.
func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("eval: line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("eval: line %d: %s: %v", e.Line, e.Field, e.Err)
}

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// ReadExamples reads labelled requests, one JSON object per line (blank lines are skipped): a System One request
// with a top-level "expected" object (question id → a choice's option name, a noul's true or false, a score's
// 0-based level index as an integer), or in Kev's labelled-record format with a "label" of the same kinds inside
// each question, or as Kev's frozen external suites keep them, under "_meta": {"gold": {id: {"label": text}}} with
// a noul's "true"/"false" and a score's index as text. Other fields are ignored. Labels given twice must agree. A line whose request does not validate,
// whose labels do not fit their questions, or that labels no question is a *LineError; reading stops there.
func ReadExamples(r io.Reader) ([]Example, error) {
	br := bufio.NewReader(r)
	var out []Example
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, &LineError{Line: n, Err: err}
		}
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			ex, perr := ParseExample(line)
			if perr != nil {
				var le *LineError
				if errors.As(perr, &le) {
					le.Line = n
					return nil, le
				}
				return nil, &LineError{Line: n, Err: perr}
			}
			ex.Line = n
			out = append(out, *ex)
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

// ParseExample reads one labelled request (see ReadExamples). Errors are *LineError with Line 0.
func ParseExample(data []byte) (*Example, error) {
	v, err := pyjson.Parse(data)
	if err != nil {
		return nil, &LineError{Err: err}
	}
	if v.Kind() != pyjson.KindObject {
		return nil, &LineError{Err: errors.New("not a JSON object")}
	}
	req := new(kev.Request)
	if err := req.UnmarshalJSON(data); err != nil {
		return nil, &LineError{Err: err}
	}
	index := make(map[string]int, len(req.Questions))
	for i, e := range req.Questions {
		index[e.ID] = i
	}
	ex := &Example{Request: req, Expected: map[string]int{}}
	if exp, ok := v.Get("expected"); ok {
		if exp.Kind() != pyjson.KindObject {
			return nil, &LineError{Field: "expected", Err: errors.New("must be an object of question id → expected answer")}
		}
		for _, m := range exp.Members() {
			i, ok := index[m.Key]
			if !ok {
				return nil, &LineError{Field: "expected." + m.Key, Err: fmt.Errorf("the request has no question %q", m.Key)}
			}
			k, err := classIndex(req.Questions[i].Question, m.Value)
			if err != nil {
				return nil, &LineError{Field: "expected." + m.Key, Err: err}
			}
			ex.Expected[m.Key] = k
		}
	}
	qs, _ := v.Get("questions")
	for _, m := range qs.Members() {
		label, ok := m.Value.Get("label")
		if !ok {
			continue
		}
		i := index[m.Key]
		k, err := classIndex(req.Questions[i].Question, label)
		field := "questions." + m.Key + ".label"
		if err != nil {
			return nil, &LineError{Field: field, Err: err}
		}
		if prev, ok := ex.Expected[m.Key]; ok && prev != k {
			return nil, &LineError{Field: field, Err: fmt.Errorf("disagrees with expected.%s", m.Key)}
		}
		ex.Expected[m.Key] = k
	}
	// Kev's frozen external suites keep the gold answers under _meta.gold.<id>.label, as text: a noul's "true" or
	// "false", a score's level index, a choice's option name.
	if meta, ok := v.Get("_meta"); ok && meta.Kind() == pyjson.KindObject {
		if gold, ok := meta.Get("gold"); ok && gold.Kind() == pyjson.KindObject {
			for _, m := range gold.Members() {
				label, ok := m.Value.Get("label")
				i, known := index[m.Key]
				if !ok || !known {
					continue
				}
				field := "_meta.gold." + m.Key + ".label"
				k, err := goldIndex(req.Questions[i].Question, label)
				if err != nil {
					return nil, &LineError{Field: field, Err: err}
				}
				if prev, ok := ex.Expected[m.Key]; ok && prev != k {
					return nil, &LineError{Field: field, Err: fmt.Errorf("disagrees with the question's other label")}
				}
				ex.Expected[m.Key] = k
			}
		}
	}
	if len(ex.Expected) == 0 {
		return nil, &LineError{Field: "expected", Err: errors.New("no question is labelled")}
	}
	return ex, nil
}

// classIndex turns an expected answer into the index of its class among q's classes.
func classIndex(q kev.Question, v pyjson.Value) (int, error) {
	switch q.Type {
	case kev.TypeNoul:
		if v.Kind() != pyjson.KindBool {
			return 0, fmt.Errorf("a noul's expected answer must be true or false, not %s", describe(v))
		}
		if v.AsBool() {
			return 1, nil
		}
		return 0, nil
	case kev.TypeChoice:
		if v.Kind() != pyjson.KindString {
			return 0, fmt.Errorf("a choice's expected answer must be an option name (a string), not %s", describe(v))
		}
		for i, o := range q.Options {
			if o.Name == v.AsString() {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%q is not one of the question's options", v.AsString())
	case kev.TypeScore:
		i, ok := v.AsInt64()
		if v.Kind() != pyjson.KindInt || !ok || i < 0 || i >= int64(len(q.Levels)) {
			return 0, fmt.Errorf("a score's expected answer must be a level index from 0 to %d, not %s", len(q.Levels)-1, describe(v))
		}
		return int(i), nil
	}
	return 0, fmt.Errorf("unknown question type %q", q.Type)
}

// goldIndex reads a gold label written as text: "true"/"false" for a noul, a decimal level index for a score, an
// option name for a choice.
func goldIndex(q kev.Question, v pyjson.Value) (int, error) {
	if v.Kind() != pyjson.KindString {
		return classIndex(q, v)
	}
	s := v.AsString()
	switch q.Type {
	case kev.TypeNoul:
		switch s {
		case "true":
			return 1, nil
		case "false":
			return 0, nil
		}
		return 0, fmt.Errorf("a noul's gold label must be \"true\" or \"false\", not %q", s)
	case kev.TypeScore:
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(q.Levels) || strconv.Itoa(i) != s {
			return 0, fmt.Errorf("a score's gold label must be a level index from 0 to %d, not %q", len(q.Levels)-1, s)
		}
		return i, nil
	}
	return classIndex(q, v)
}

func describe(v pyjson.Value) string {
	b, err := v.MarshalJSON()
	if err != nil || len(b) > 40 {
		return v.Kind().String()
	}
	return strconv.Quote(string(b))
}

// Keys returns a question's class keys in order: "false", "true" for a noul; the option names of a choice; the
// level indexes "0", "1", ... of a score.
func Keys(q kev.Question) []string {
	switch q.Type {
	case kev.TypeNoul:
		return []string{"false", "true"}
	case kev.TypeChoice:
		out := make([]string, len(q.Options))
		for i, o := range q.Options {
			out[i] = o.Name
		}
		return out
	}
	out := make([]string, len(q.Levels))
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}
