// Package kev runs Kev decision models: give it a text (the state) and typed questions, and it returns calibrated
// probabilities and the answers Kev's TypeSafe "System One" API gives, byte for byte where that API defines bytes.
//
// Load a checkpoint once, then ask:
//
//	p, err := kev.Load(ctx, "jaredpalmer/kev-4b", kev.Options{Device: kev.CUDA})
//	...
//	answers, err := p.Ask(ctx, "Shoes arrived two weeks late.",
//		kev.Noul("escalate", "Does this need urgent human attention?"),
//		kev.Choice("department", "Which team?", kev.Opt("returns", ""), kev.Opt("shipping", "")))
//
// A question is a yes/no Noul, a Choice among named options, or a Score over ordered levels. The state is text or
// structured content (maps, slices, numbers, booleans; see ValueOf), rendered into labelled text exactly as Kev
// renders it. Predictor.Do takes and returns the full System One Request and Response; a Response marshals to the
// bytes of Kev's HTTP API. The HTTP API itself is package github.com/kevgo/kev/server.
//
// The CPU backend is always there; the CUDA backend registers itself when a program imports
// github.com/kevgo/kev/tensor/cuda (blank import) and is built with -tags cuda.
package kev

import (
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// DefaultModel is the model name a request gets when it names none. Any name is accepted and echoed back.
const DefaultModel = "kev-latest"

// QuestionType is the kind of a question: "noul", "choice" or "score".
type QuestionType string

// The three question types.
const (
	// TypeNoul is a yes-or-no question: the answer is P(yes).
	TypeNoul QuestionType = "noul"
	// TypeChoice picks one of named options: the answer is the most likely name.
	TypeChoice QuestionType = "choice"
	// TypeScore rates on ordered levels: the answer is the expected level index.
	TypeScore QuestionType = "score"
)

// Question is one typed question. Instructions and every description are content (text, objects, arrays,
// numbers, booleans or null), rendered into labelled text for the model; the question id is never shown to it.
type Question struct {
	Type         QuestionType
	Instructions Value // null: no instructions

	// Noul only: the descriptions of the two options, the "true" and "false" criteria. Null: none.
	True, False Value

	// Choice only: the options in order, 1..255 of them, names unique.
	Options []Option

	// Score only: the levels, lowest first, 1..255 of them.
	Levels []Value
}

// Option is one option of a Choice: its name, which is the answer's key, and an optional description.
type Option struct {
	Name        string
	Description Value // null or "": the option reads as its name alone
}

// QuestionEntry is a question with its id. A request's questions are ordered; answers come back in the same order.
type QuestionEntry struct {
	ID       string
	Question Question
}

// Request is a System One request: the state (the document), the model name, and the questions. It marshals to
// and from the JSON body of Kev's HTTP API; unmarshalling validates as Kev's server does.
type Request struct {
	Model     string // echoed in the response; empty means DefaultModel
	State     Value
	Questions []QuestionEntry
}

// NewRequest returns a request on a plain-text state with the default model.
func NewRequest(state string, questions ...QuestionEntry) *Request {
	return &Request{State: Text(state), Questions: questions}
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

// Score returns a question over ordered levels, lowest first.
func Score(id, instructions string, levels ...string) QuestionEntry {
	vs := make([]Value, len(levels))
	for i, l := range levels {
		vs[i] = Value{pyjson.String(l)}
	}
	return QuestionEntry{ID: id, Question: Question{Type: TypeScore, Instructions: Text(instructions), Levels: vs}}
}

// MarshalJSON returns the request as the compact JSON body a client sends: state, model, then questions in order.
func (r *Request) MarshalJSON() ([]byte, error) { return toSysRequest(r).MarshalJSON() }

// UnmarshalJSON reads a System One request body as Kev's server does (Python's json, then pydantic's rules): a
// body that does not fit is a *ValidationError listing every problem.
func (r *Request) UnmarshalJSON(data []byte) error {
	sr, err := systemone.DecodeRequest(data)
	if err != nil {
		return publicError(err)
	}
	*r = *fromSysRequest(sr)
	return nil
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

// MarshalJSON returns the answer's compact JSON in Kev's key order: noul {type, noul}; choice {type, choice,
// confidence, probabilities}; score {type, score, legend, probabilities, confidence}.
func (a Answer) MarshalJSON() ([]byte, error) { return toSysAnswer(a).MarshalJSON() }

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
	LatencyMS float64 // model time of the batch the request ran in (of all of them, when it ran in slices), rounded to 0.1 ms

	// Truncated is set when the predictor truncates long states (Options.TruncateStates), on every response:
	// whether this state was cut. It also makes the usage carry state_tokens and state_tokens_used.
	Truncated *bool
}

// MarshalJSON returns the exact bytes of Kev's HTTP response body: compact JSON, UTF-8 unescaped, Python float
// repr, Kev's key order. NaN or infinite numbers are an error, as they are for the Python server.
func (r *Response) MarshalJSON() ([]byte, error) { return toSysResponse(r).MarshalJSON() }

// String returns the response's JSON text, or the marshalling error's text.
func (r *Response) String() string { return toSysResponse(r).String() }
