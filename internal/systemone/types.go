// Package systemone is Kev's TypeSafe "System One" protocol: the request and answer types as Kev's server reads
// and writes them, validation with FastAPI's 422 bodies, rendering of JSON content into the text the model reads,
// encoding into token rows, answers from probabilities, permute and separate, and the model card.
//
// Data flows one way: a Request (DecodeRequest) renders into a Record (ToRecord: the text the model reads), which
// Encode packs into token rows; the model's probabilities become answers (ToAnswers), and a Response marshals to
// the bytes of Kev's HTTP API. Package kev wraps it in its public API; package server serves it over HTTP.
package systemone

import (
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/pyjson"
)

// DefaultModel is the model name a request gets when it names none. Any name is accepted and echoed back.
const DefaultModel = "kev-latest"

// MaxOptions is the most options a Choice and the most levels a Score may have.
const MaxOptions = 255

// QuestionType is the kind of a question: "noul", "choice" or "score".
type QuestionType string

// The three question types.
const (
	TypeNoul   QuestionType = "noul"   // yes or no: the answer is P(yes)
	TypeChoice QuestionType = "choice" // one of named options: the answer is the most likely name
	TypeScore  QuestionType = "score"  // ordered levels: the answer is the expected level index
)

// Question is one typed question. Instructions and every description are JSON content (text, objects, arrays,
// numbers, booleans or null), rendered into labelled text for the model; the question id is never shown to it.
type Question struct {
	Type         QuestionType
	Instructions pyjson.Value // null: no instructions

	// Noul only: the descriptions of the two options, the "true" and "false" criteria. Null: none.
	True, False pyjson.Value

	// Choice only: the options in order, 1..MaxOptions of them, names unique.
	Options []Option

	// Score only: the levels, lowest first, 1..MaxOptions of them.
	Levels []pyjson.Value
}

// Option is one option of a Choice: its name, which is the answer's key, and an optional description.
type Option struct {
	Name        string
	Description pyjson.Value // null or "": the option reads as its name alone
}

// QuestionEntry is a question with its id. A request's questions are ordered; answers come back in the same order.
type QuestionEntry struct {
	ID       string
	Question Question
}

// Request is a System One request: the state (the document, as JSON content), the model name, and the questions.
type Request struct {
	Model     string // echoed in the response; empty means DefaultModel
	State     pyjson.Value
	Questions []QuestionEntry

	shared *sharedState // the parts of one Separate or Permute: the state rendered and encoded once
}

// Content is JSON content as Kev reads it (a state, instructions, a description, a level): key order kept, integer
// and float literals told apart, rendered with Python's str() rules.
type Content = pyjson.Value

// ParseContent reads JSON content with Python's json semantics (see DecodeRequest).
func ParseContent(data []byte) (Content, error) { return pyjson.Parse(data) }

// Text returns s as JSON content for instructions and descriptions, with "" as null (the two render alike).
func Text(s string) pyjson.Value {
	if s == "" {
		return pyjson.Null()
	}
	return pyjson.String(s)
}

// Noul returns a yes/no question.
func Noul(id, instructions string) QuestionEntry {
	return QuestionEntry{ID: id, Question: Question{Type: TypeNoul, Instructions: Text(instructions)}}
}

// NoulWith returns a yes/no question whose options carry descriptions: yes for "true", no for "false".
func NoulWith(id, instructions, yes, no string) QuestionEntry {
	e := Noul(id, instructions)
	e.Question.True, e.Question.False = Text(yes), Text(no)
	return e
}

// Choice returns a question that picks one of options.
func Choice(id, instructions string, options ...Option) QuestionEntry {
	return QuestionEntry{ID: id, Question: Question{Type: TypeChoice, Instructions: Text(instructions), Options: options}}
}

// Opt returns a Choice option; an empty description means none.
func Opt(name, description string) Option {
	return Option{Name: name, Description: Text(description)}
}

// OptionNames returns options with the given names and no descriptions.
func OptionNames(names ...string) []Option {
	out := make([]Option, len(names))
	for i, n := range names {
		out[i] = Option{Name: n}
	}
	return out
}

// Score returns a question over ordered levels, lowest first.
func Score(id, instructions string, levels ...string) QuestionEntry {
	vs := make([]pyjson.Value, len(levels))
	for i, l := range levels {
		vs[i] = pyjson.String(l)
	}
	return QuestionEntry{ID: id, Question: Question{Type: TypeScore, Instructions: Text(instructions), Levels: vs}}
}

// NewRequest returns a request on a plain-text state with the default model.
func NewRequest(state string, questions ...QuestionEntry) *Request {
	return &Request{Model: DefaultModel, State: pyjson.String(state), Questions: questions}
}

// Part reports whether r is one part of a Separate or Permute request: one of many requests on the same state that
// the server sends for one client, one after the other. A batcher may let other clients' requests go first.
func (r *Request) Part() bool { return r.shared != nil }

// ModelName returns r.Model, or DefaultModel when it is empty.
func (r *Request) ModelName() string {
	if r.Model == "" {
		return DefaultModel
	}
	return r.Model
}

// Value returns the request as the JSON object a client sends: state, model, then questions in order, each with
// type, instructions (when not null) and criteria (a noul's only when it has a description).
func (r *Request) Value() pyjson.Value {
	qs := make([]pyjson.Member, len(r.Questions))
	for i, e := range r.Questions {
		qs[i] = pyjson.M(e.ID, e.Question.Value())
	}
	return pyjson.Object(
		pyjson.M("state", r.State),
		pyjson.M("model", pyjson.String(r.ModelName())),
		pyjson.M("questions", pyjson.Object(qs...)),
	)
}

// MarshalJSON returns the request in compact JSON.
func (r *Request) MarshalJSON() ([]byte, error) { return pyjson.Compact(r.Value()) }

// UnmarshalJSON decodes and validates a request as DecodeRequest does.
func (r *Request) UnmarshalJSON(data []byte) error {
	req, err := DecodeRequest(data)
	if err != nil {
		return err
	}
	*r = *req
	return nil
}

// Value returns the question as its JSON object.
func (q Question) Value() pyjson.Value {
	ms := []pyjson.Member{pyjson.M("type", pyjson.String(string(q.Type)))}
	if !q.Instructions.IsNull() {
		ms = append(ms, pyjson.M("instructions", q.Instructions))
	}
	switch q.Type {
	case TypeNoul:
		if !q.True.IsNull() || !q.False.IsNull() {
			ms = append(ms, pyjson.M("criteria", pyjson.Object(pyjson.M("true", q.True), pyjson.M("false", q.False))))
		}
	case TypeChoice:
		opts := make([]pyjson.Member, len(q.Options))
		for i, o := range q.Options {
			opts[i] = pyjson.M(o.Name, o.Description)
		}
		ms = append(ms, pyjson.M("criteria", pyjson.Object(opts...)))
	case TypeScore:
		ms = append(ms, pyjson.M("criteria", pyjson.Array(append([]pyjson.Value(nil), q.Levels...)...)))
	}
	return pyjson.Object(ms...)
}

// Answer is the typed answer to one question. Every number is rounded to 4 decimals as Python's round(x, 4).
type Answer struct {
	Type QuestionType

	Noul float64 // noul: P(yes)

	Choice string // choice: the key of the most likely option (the first on ties)

	Score  float64       // score: the expected level index, from the unrounded probabilities
	Legend []LegendEntry // score: the rendered text of each level

	Confidence    float64 // choice and score: 0 at uniform, 1 at certainty
	Probabilities []Prob  // choice and score: per option or level, in order
}

// Prob is one option's (or level's) probability under its key: the option name, or the level index as text.
type Prob struct {
	Key string
	P   float64
}

// LegendEntry is one score level: its index as text and its rendered text.
type LegendEntry struct {
	Key  string
	Text string
}

// AnswerEntry is an answer with its question's id.
type AnswerEntry struct {
	ID     string
	Answer Answer
}

// Value returns the answer as Kev's JSON object, in Kev's key order:
// noul {type, noul}; choice {type, choice, confidence, probabilities}; score {type, score, legend, probabilities,
// confidence}.
func (a Answer) Value() pyjson.Value {
	t := pyjson.M("type", pyjson.String(string(a.Type)))
	switch a.Type {
	case TypeNoul:
		return pyjson.Object(t, pyjson.M("noul", pyjson.Float(a.Noul)))
	case TypeChoice:
		return pyjson.Object(t, pyjson.M("choice", pyjson.String(a.Choice)),
			pyjson.M("confidence", pyjson.Float(a.Confidence)), pyjson.M("probabilities", probsValue(a.Probabilities)))
	}
	legend := make([]pyjson.Member, len(a.Legend))
	for i, l := range a.Legend {
		legend[i] = pyjson.M(l.Key, pyjson.String(l.Text))
	}
	return pyjson.Object(t, pyjson.M("score", pyjson.Float(a.Score)), pyjson.M("legend", pyjson.Object(legend...)),
		pyjson.M("probabilities", probsValue(a.Probabilities)), pyjson.M("confidence", pyjson.Float(a.Confidence)))
}

func probsValue(ps []Prob) pyjson.Value {
	ms := make([]pyjson.Member, len(ps))
	for i, p := range ps {
		ms[i] = pyjson.M(p.Key, pyjson.Float(p.P))
	}
	return pyjson.Object(ms...)
}

// MarshalJSON returns the answer's compact JSON.
func (a Answer) MarshalJSON() ([]byte, error) { return pyjson.Compact(a.Value()) }

// AnswersValue returns the answers object {id: answer} in question order. A repeated id keeps its first position
// and its last answer, as a Python dict does.
func AnswersValue(answers []AnswerEntry) pyjson.Value {
	ms := make([]pyjson.Member, len(answers))
	for i, e := range answers {
		ms[i] = pyjson.M(e.ID, e.Answer.Value())
	}
	return pyjson.Object(ms...)
}

// Usage is a response's token accounting.
type Usage struct {
	InputTokens  int // tokens of the packed encoding: the state once plus every question's branch
	OutputTokens int // tokens of Python's json.dumps of the answers (a billing-style figure; nothing is generated)

	// Truncate mode only (written when Response.Truncated is set): the state's full token count and the count read,
	// both including the <state> token.
	StateTokens, StateTokensUsed int

	// CachedTokens, when set, is written as input_tokens_details.cached_tokens: the state tokens a prefix-cache hit
	// saved, else 0. Kev's primary server does not send it; a sibling server version does.
	CachedTokens *int
}

// Response is a System One response.
type Response struct {
	Model     string
	Answers   []AnswerEntry
	Usage     Usage
	LatencyMS float64 // model time of the batch the request ran in, rounded to 0.1 ms

	// Truncated is set by a server in truncate mode, on every response: whether this state was cut. It also makes
	// the usage carry state_tokens and state_tokens_used.
	Truncated *bool
}

// Value returns the response as Kev's JSON object: model, answers, usage, latency_ms[, truncated].
func (r *Response) Value() pyjson.Value {
	usage := []pyjson.Member{
		pyjson.M("input_tokens", pyjson.Int(int64(r.Usage.InputTokens))),
		pyjson.M("output_tokens", pyjson.Int(int64(r.Usage.OutputTokens))),
	}
	if r.Usage.CachedTokens != nil {
		usage = append(usage, pyjson.M("input_tokens_details",
			pyjson.Object(pyjson.M("cached_tokens", pyjson.Int(int64(*r.Usage.CachedTokens))))))
	}
	if r.Truncated != nil {
		usage = append(usage, pyjson.M("state_tokens", pyjson.Int(int64(r.Usage.StateTokens))),
			pyjson.M("state_tokens_used", pyjson.Int(int64(r.Usage.StateTokensUsed))))
	}
	ms := []pyjson.Member{
		pyjson.M("model", pyjson.String(r.Model)),
		pyjson.M("answers", AnswersValue(r.Answers)),
		pyjson.M("usage", pyjson.Object(usage...)),
		pyjson.M("latency_ms", pyjson.Float(r.LatencyMS)),
	}
	if r.Truncated != nil {
		ms = append(ms, pyjson.M("truncated", pyjson.Bool(*r.Truncated)))
	}
	return pyjson.Object(ms...)
}

// MarshalJSON returns the exact bytes of Kev's HTTP response body: compact JSON, UTF-8 unescaped, Python float
// repr. NaN or infinite numbers are an error, as they are for the Python server.
func (r *Response) MarshalJSON() ([]byte, error) { return pyjson.Compact(r.Value()) }

// String returns the response's JSON text, or the marshalling error's text.
func (r *Response) String() string {
	b, err := r.MarshalJSON()
	if err != nil {
		return "kev: " + err.Error()
	}
	return string(b)
}

// levelKey is the probability and legend key of score level i.
func levelKey(i int) string { return strconv.Itoa(i) }

// joinPath joins a location into a dotted path for messages.
func joinPath(loc []any) string {
	var sb strings.Builder
	for i, p := range loc {
		if i > 0 {
			sb.WriteByte('.')
		}
		switch p := p.(type) {
		case string:
			sb.WriteString(p)
		case int:
			sb.WriteString(strconv.Itoa(p))
		}
	}
	return sb.String()
}
