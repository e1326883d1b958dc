package systemone

import (
	"context"
	"strconv"
	"time"
)

// Admitter decides whether an encoded request may wait for the model: a server keeps the tokens of the requests
// in flight under a bound with one. Admit returns a release func to call once the request is answered, or an
// *OverloadError.
type Admitter interface {
	Admit(tokens int) (release func(), err error)
}

type admitterKey struct{}

// WithAdmitter returns ctx carrying a; AdmitTokens asks it.
func WithAdmitter(ctx context.Context, a Admitter) context.Context {
	return context.WithValue(ctx, admitterKey{}, a)
}

// AdmitTokens asks ctx's Admitter (see WithAdmitter) to admit an encoded request of the given tokens. Without one,
// every request is admitted. Call release once the request is answered or abandoned.
func AdmitTokens(ctx context.Context, tokens int) (release func(), err error) {
	a, _ := ctx.Value(admitterKey{}).(Admitter)
	if a == nil {
		return func() {}, nil
	}
	return a.Admit(tokens)
}

// OverloadError refuses a request because the requests already in flight hold as much of a resource as the
// server allows (HTTP 503 with Retry-After).
type OverloadError struct {
	Resource   string        // "bytes" (request bodies) or "tokens" (encoded requests)
	Want       int64         // what this request needs
	InFlight   int64         // what the requests in flight hold
	Limit      int64         // the bound
	RetryAfter time.Duration // when to try again
}

// Error says what is full.
func (e *OverloadError) Error() string {
	return "the server is busy: requests in flight hold " + strconv.FormatInt(e.InFlight, 10) + " " + e.Resource +
		" of its " + strconv.FormatInt(e.Limit, 10) + "-" + singular(e.Resource) + " limit and this one needs " +
		strconv.FormatInt(e.Want, 10) + "; retry later"
}

func singular(s string) string {
	if len(s) > 1 && s[len(s)-1] == 's' {
		return s[:len(s)-1]
	}
	return s
}
