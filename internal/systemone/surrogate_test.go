package systemone

import (
	"errors"
	"testing"
)

// TestLoneSurrogateIDs: ids "\ud800" and "\udc00" both read as U+FFFD and would be one question: such a body is
// refused with a 422 at the id; a surrogate pair, an escaped backslash before "ud800" and a literal U+FFFD without
// a lone escape are accepted.
func TestLoneSurrogateIDs(t *testing.T) {
	for _, c := range []struct {
		body   string
		refuse bool
	}{
		{`{"state":"s","questions":{"\ud800":{"type":"noul"},"\udc00":{"type":"noul"}}}`, true},
		{`{"state":"s","questions":{"a\uDBFFb":{"type":"noul"}}}`, true},
		{`{"state":"\ud800","questions":{"q":{"type":"noul"}}}`, false},
		{`{"state":"s","questions":{"\ud83d\ude00":{"type":"noul"}}}`, false},
		{`{"state":"s","questions":{"\\ud800":{"type":"noul"}}}`, false},
		{`{"state":"s","questions":{"` + "\ufffd" + `":{"type":"noul"}}}`, false},
		{`{"state":"\udc00","questions":{"` + "\ufffd" + `":{"type":"noul"}}}`, true},
	} {
		req, err := DecodeRequest([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		err = LoneSurrogateIDs([]byte(c.body), req)
		var ve *ValidationError
		if got := errors.As(err, &ve); got != c.refuse {
			t.Errorf("%s: refused %v, want %v", c.body, got, c.refuse)
		} else if got && (ve.Errors[0].Type != "value_error" || ve.Errors[0].Loc[0] != "questions") {
			t.Errorf("%s: %+v", c.body, ve.Errors[0])
		}
	}
}
