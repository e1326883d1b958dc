package kev

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/kevgo/kev/internal/systemone"
)

// ErrClosed is returned by a Predictor's methods after Close.
var ErrClosed = errors.New("kev: predictor closed")

// ValidationError is a request that does not fit the System One schema, with every problem found. Kev's HTTP API
// answers it with status 422 and pydantic's detail list; package server sends those bytes.
type ValidationError struct {
	Problems []Problem
	err      *systemone.ValidationError
}

// Problem is one thing wrong with a request: where, as a dotted path of JSON keys with array indexes in brackets
// ("questions.urgency.criteria", "state"; "" for the request itself), and what.
type Problem struct {
	Field string
	Msg   string
}

// Error lists the problems: "kev: invalid request: questions.q.criteria: list should have at least 1 item ...".
func (e *ValidationError) Error() string {
	var sb strings.Builder
	sb.WriteString("kev: invalid request")
	for i, p := range e.Problems {
		if i == 0 {
			sb.WriteString(": ")
		} else {
			sb.WriteString("; ")
		}
		if p.Field != "" {
			sb.WriteString(p.Field)
			sb.WriteString(": ")
		}
		sb.WriteString(p.Msg)
	}
	return sb.String()
}

// Unwrap returns the protocol-level error the problems were read from.
func (e *ValidationError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// StateTooLongError refuses a state over the token limit (65,536 tokens, the <state> token included) when the
// predictor does not truncate long states (Options.TruncateStates).
type StateTooLongError struct {
	Tokens int // the state's tokens, <state> included
	Limit  int
	err    *systemone.StateTooLongError
}

// Error says how long the state is and what to do.
func (e *StateTooLongError) Error() string {
	if e.err != nil {
		return "kev: " + e.err.Error()
	}
	return "kev: " + (&systemone.StateTooLongError{Tokens: e.Tokens, Limit: e.Limit}).Error()
}

// Unwrap returns the protocol-level error.
func (e *StateTooLongError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// RowTooLongError refuses a question whose row (the state read plus the question's own tokens) is over the row
// limit (73,728 tokens).
type RowTooLongError struct {
	Question int    // index in the request
	ID       string // the question's id
	Tokens   int    // the question's tokens
	StateLen int    // the state tokens read, <state> included
	Limit    int    // the row limit
	err      *systemone.RowTooLongError
}

// Error names the question and the counts.
func (e *RowTooLongError) Error() string {
	if e.err != nil && e.err.Bytes > 0 {
		return fmt.Sprintf("kev: question %q: %s", e.ID, e.err.Error())
	}
	return fmt.Sprintf("kev: question %q: %d tokens with a %d-token state, over the %d-token row limit",
		e.ID, e.Tokens, e.StateLen, e.Limit)
}

// Unwrap returns the protocol-level error.
func (e *RowTooLongError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// TooManyQuestionsError refuses a request with more questions than Options.MaxQuestions allows. Kev has no such
// limit, and none is set by default.
type TooManyQuestionsError struct {
	Questions int // the request's questions
	Limit     int // Options.MaxQuestions
	err       *systemone.TooManyQuestionsError
}

// Error says how many questions the request has and the limit.
func (e *TooManyQuestionsError) Error() string {
	return "kev: " + (&systemone.TooManyQuestionsError{Questions: e.Questions, Limit: e.Limit}).Error()
}

// Unwrap returns the protocol-level error.
func (e *TooManyQuestionsError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// publicError turns the protocol's typed errors into the package's own; others pass through.
func publicError(err error) error {
	var ve *systemone.ValidationError
	var se *systemone.StateTooLongError
	var re *systemone.RowTooLongError
	var qe *systemone.TooManyQuestionsError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		ps := ve.Problems()
		out := &ValidationError{Problems: make([]Problem, len(ps)), err: ve}
		for i, p := range ps {
			out.Problems[i] = Problem{Field: p.Field, Msg: p.Msg}
		}
		return out
	case errors.As(err, &se):
		return &StateTooLongError{Tokens: se.Tokens, Limit: se.Limit, err: se}
	case errors.As(err, &qe):
		return &TooManyQuestionsError{Questions: qe.Questions, Limit: qe.Limit, err: qe}
	case errors.As(err, &re):
		return &RowTooLongError{Question: re.Question, ID: re.ID, Tokens: re.Tokens, StateLen: re.StateLen, Limit: re.Limit, err: re}
	}
	return err
}

// NotFoundError reports a checkpoint or base model that Load found neither as a local directory nor on the hub
// (or, offline, in the hub's local cache). It comes wrapped in a *LoadError.
type NotFoundError struct {
	Name  string // as given, or as head.pt names the base model
	Local string // the absolute directory looked for; "" when the name could only be a hub name
	Hub   error  // what the hub or its cache answered; nil when the name could only be a path (the hub not asked)
	Hint  string // what to pass instead
}

// Error says where the name was looked for, what the hub answered and what to pass.
func (e *NotFoundError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: ", e.Name)
	switch {
	case e.Hub == nil:
		fmt.Fprintf(&sb, "no directory %s", e.Local)
	case e.Local != "":
		fmt.Fprintf(&sb, "no directory %s, and the hub could not serve it (%v)", e.Local, e.Hub)
	default:
		fmt.Fprintf(&sb, "the hub could not serve it (%v)", e.Hub)
	}
	if e.Hint != "" {
		sb.WriteString("; ")
		sb.WriteString(e.Hint)
	}
	return sb.String()
}

// Unwrap returns the hub's error, or fs.ErrNotExist when the hub was not asked.
func (e *NotFoundError) Unwrap() error {
	if e.Hub == nil {
		return fs.ErrNotExist
	}
	return e.Hub
}
