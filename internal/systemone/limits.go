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
