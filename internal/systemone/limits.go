package systemone

import "fmt"

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
