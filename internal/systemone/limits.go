package systemone

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/pyjson"
)

// TooManyQuestionsError refuses a request with more questions than the server's configured limit. Kev has no such
// limit; a server sets one to bound what one request may ask of the model.
type TooManyQuestionsError struct {
	Questions int // the request's questions
	Limit     int // the most a request may have
}

// Error says how many questions the request has and the limit.
func (e *TooManyQuestionsError) Error() string {
	return fmt.Sprintf("%s questions, over this server's limit of %s per request: split them across requests",
		commaInt(e.Questions), commaInt(e.Limit))
}

// Detail returns the 422 detail: Error.
func (e *TooManyQuestionsError) Detail() string { return e.Error() }

// MaxQuestionIDBytes bounds a question id: every answer repeats its id, and the usage counts the tokens of the
// answers, so an id is held and tokenised a few times over. Kev has no such limit; no real id comes near it.
const MaxQuestionIDBytes = 4096

// QuestionIDTooLongError refuses a question whose id is longer than MaxQuestionIDBytes.
type QuestionIDTooLongError struct {
	Question int // index in the request
	Bytes    int // the id's length
	Limit    int
}

// Error says which question, how long its id is and the limit (not the id itself).
func (e *QuestionIDTooLongError) Error() string {
	return fmt.Sprintf("question %d has an id of %s bytes, over this server's limit of %s bytes", e.Question,
		commaInt(e.Bytes), commaInt(e.Limit))
}

// Detail returns the 422 detail: Error.
func (e *QuestionIDTooLongError) Detail() string { return e.Error() }

// checkIDs refuses a request with an id over MaxQuestionIDBytes.
func checkIDs(req *Request) error {
	for i, q := range req.Questions {
		if len(q.ID) > MaxQuestionIDBytes {
			return &QuestionIDTooLongError{Question: i, Bytes: len(q.ID), Limit: MaxQuestionIDBytes}
		}
	}
	return nil
}

// LoneSurrogateIDs refuses a request whose body holds a \u escape of a lone UTF-16 surrogate (one not in a
// high-low pair) when one of its question ids holds U+FFFD: the parser reads a lone surrogate as U+FFFD (a Go
// string holds UTF-8), so "\ud800" and "\udc00" would be one id, and two questions one answer. Kev keeps them
// apart and then fails to send its response; this server says why at once, with a 422 at the ids (loc prefixes
// the location, such as "request" for a permute body).
func LoneSurrogateIDs(body []byte, req *Request, loc ...any) error {
	if req == nil || !hasLoneSurrogate(body) {
		return nil
	}
	var errs []FieldError
	for _, q := range req.Questions {
		if strings.ContainsRune(q.ID, utf8.RuneError) {
			errs = append(errs, FieldError{Type: "value_error", Loc: append(append([]any{}, loc...), "questions", q.ID),
				Msg:   "Value error, the body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff not in a pair) and this question id holds U+FFFD: ids that differ only there cannot be told apart",
				Input: pyjson.String(q.ID)})
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	return nil
}

// hasLoneSurrogate reports whether JSON text holds a \u escape of a surrogate not in a high-low pair.
func hasLoneSurrogate(b []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range b[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // an escaped character: \\ included
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11
				continue
			}
			return true
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}
