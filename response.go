package kev

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/pyjson"
)

// Asker is what a Predictor and a Client have in common: code written against it runs on a model loaded in the
// process, on a System One server over HTTP, or on the fake of package kevtest in tests.
type Asker interface {
	Ask(ctx context.Context, state any, questions ...QuestionEntry) ([]AnswerEntry, error)
	Do(ctx context.Context, req *Request) (*Response, error)
}

var _ Asker = (*Predictor)(nil)

// ResponseError reports a System One response body that could not be read: where (a dotted path of JSON keys, ""
// for the body itself) and what.
type ResponseError struct {
	Field  string
	Reason string
}

// Error names the place and the problem.
func (e *ResponseError) Error() string {
	if e.Field == "" {
		return "kev: response: " + e.Reason
	}
	return "kev: response: " + e.Field + ": " + e.Reason
}

// UnmarshalJSON reads a System One response body, as Kev's server or package server writes it: the answers keep
// the order of the body's object (the questions' order), the probabilities that of the options or levels. Keys it
// does not know are ignored. A body that does not fit is a *ResponseError.
func (r *Response) UnmarshalJSON(data []byte) error {
	v, err := pyjson.Parse(data)
	if err != nil {
		return &ResponseError{Reason: err.Error()}
	}
	d := &decoder{}
	out := d.response(v)
	if d.err != nil {
		return d.err
	}
	*r = *out
	return nil
}

// UnmarshalJSON reads one answer object of a response body (see Response.UnmarshalJSON).
func (a *Answer) UnmarshalJSON(data []byte) error {
	v, err := pyjson.Parse(data)
	if err != nil {
		return &ResponseError{Reason: err.Error()}
	}
	d := &decoder{}
	out := d.answer(v, "")
	if d.err != nil {
		return d.err
	}
	*a = out
	return nil
}

// decoder walks a parsed response, keeping the first problem it meets.
type decoder struct{ err *ResponseError }

func (d *decoder) fail(field, format string, args ...any) {
	if d.err == nil {
		d.err = &ResponseError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// object returns v's members, or fails when v is not an object.
func (d *decoder) object(v pyjson.Value, path string) []pyjson.Member {
	if v.Kind() != pyjson.KindObject {
		d.fail(path, "want an object, got %s", v.Kind())
		return nil
	}
	return v.Members()
}

func (d *decoder) number(v pyjson.Value, path string) float64 {
	if k := v.Kind(); k != pyjson.KindFloat && k != pyjson.KindInt {
		d.fail(path, "want a number, got %s", k)
		return 0
	}
	return v.AsFloat()
}

func (d *decoder) integer(v pyjson.Value, path string) int {
	i, ok := v.AsInt64()
	if !ok {
		d.fail(path, "want an integer, got %s", v.Kind())
	}
	return int(i)
}

func (d *decoder) text(v pyjson.Value, path string) string {
	if v.Kind() != pyjson.KindString {
		d.fail(path, "want a string, got %s", v.Kind())
	}
	return v.AsString()
}

func (d *decoder) response(v pyjson.Value) *Response {
	r := &Response{}
	for _, m := range d.object(v, "") {
		switch m.Key {
		case "model":
			r.Model = d.text(m.Value, m.Key)
		case "answers":
			for _, a := range d.object(m.Value, m.Key) {
				r.Answers = append(r.Answers, AnswerEntry{ID: a.Key, Answer: d.answer(a.Value, join(m.Key, a.Key))})
			}
		case "usage":
			r.Usage = d.usage(m.Value)
		case "latency_ms":
			r.LatencyMS = d.number(m.Value, m.Key)
		case "truncated":
			if m.Value.Kind() != pyjson.KindBool {
				d.fail(m.Key, "want a boolean, got %s", m.Value.Kind())
			}
			t := m.Value.AsBool()
			r.Truncated = &t
		}
	}
	return r
}

func (d *decoder) usage(v pyjson.Value) Usage {
	var u Usage
	for _, m := range d.object(v, "usage") {
		path := join("usage", m.Key)
		switch m.Key {
		case "input_tokens":
			u.InputTokens = d.integer(m.Value, path)
		case "output_tokens":
			u.OutputTokens = d.integer(m.Value, path)
		case "state_tokens":
			u.StateTokens = d.integer(m.Value, path)
		case "state_tokens_used":
			u.StateTokensUsed = d.integer(m.Value, path)
		case "input_tokens_details":
			for _, dm := range d.object(m.Value, path) {
				if dm.Key == "cached_tokens" {
					n := d.integer(dm.Value, join(path, dm.Key))
					u.CachedTokens = &n
				}
			}
		}
	}
	return u
}

func (d *decoder) answer(v pyjson.Value, path string) Answer {
	var a Answer
	for _, m := range d.object(v, path) {
		p := join(path, m.Key)
		switch m.Key {
		case "type":
			a.Type = QuestionType(d.text(m.Value, p))
		case "noul":
			a.Noul = d.number(m.Value, p)
		case "choice":
			a.Choice = d.text(m.Value, p)
		case "score":
			a.Score = d.number(m.Value, p)
		case "confidence":
			a.Confidence = d.number(m.Value, p)
		case "probabilities":
			for _, pm := range d.object(m.Value, p) {
				a.Probabilities = append(a.Probabilities, Prob{Key: pm.Key, P: d.number(pm.Value, join(p, pm.Key))})
			}
		case "legend":
			for _, lm := range d.object(m.Value, p) {
				a.Legend = append(a.Legend, LegendEntry{Key: lm.Key, Text: d.text(lm.Value, join(p, lm.Key))})
			}
		}
	}
	switch a.Type {
	case TypeNoul, TypeChoice, TypeScore:
	default:
		d.fail(join(path, "type"), `want "noul", "choice" or "score", got %q`, a.Type)
	}
	return a
}

// Answer returns the answer to the question with that id (the last one, if the id is repeated, as the JSON body
// keeps it), and whether there is one.
func (r *Response) Answer(id string) (Answer, bool) { return Lookup(r.Answers, id) }

// Lookup returns the answer to the question with that id among answers, as Ask returns them, and whether there is
// one (the last, if the id is repeated).
func Lookup(answers []AnswerEntry, id string) (Answer, bool) {
	for i := len(answers) - 1; i >= 0; i-- {
		if answers[i].ID == id {
			return answers[i].Answer, true
		}
	}
	return Answer{}, false
}

// String returns the answer in a line: "noul 0.3775" (P(yes)); "choice shipping (confidence 0.52: returns 0.24,
// shipping 0.76)"; "score 1.42 (confidence 0.31: 0 0.12, 1 0.34, 2 0.54)".
func (a Answer) String() string {
	var sb strings.Builder
	sb.WriteString(string(a.Type))
	switch a.Type {
	case TypeNoul:
		fmt.Fprintf(&sb, " %s", num(a.Noul))
		return sb.String()
	case TypeChoice:
		fmt.Fprintf(&sb, " %s", a.Choice)
	case TypeScore:
		fmt.Fprintf(&sb, " %s", num(a.Score))
	}
	fmt.Fprintf(&sb, " (confidence %s:", num(a.Confidence))
	for i, p := range a.Probabilities {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, " %s %s", p.Key, num(p.P))
	}
	sb.WriteByte(')')
	return sb.String()
}

// num formats a rounded answer number as briefly as it reads: 0.4406, 1, 0.
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// String returns "id: " and the answer's String.
func (e AnswerEntry) String() string { return e.ID + ": " + e.Answer.String() }
