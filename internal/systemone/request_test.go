package systemone

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

// TestValidationMatchesPydantic checks every 422 detail list against pydantic 2 with FastAPI's body location
// (testdata/gen_validation.py): the spec's rejected requests (empty score criteria, unknown type, 256 options,
// no questions) and more, and that the accepted ones are accepted.
func TestValidationMatchesPydantic(t *testing.T) {
	b, err := os.ReadFile("testdata/validation.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Body   json.RawMessage `json:"body"`
			OK     bool            `json:"ok"`
			Detail json.RawMessage `json:"detail"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 30 {
		t.Fatalf("%d cases", len(file.Cases))
	}
	for _, c := range file.Cases {
		body := parse(t, string(c.Body))
		req, err := RequestFromValue(body)
		if body.IsNull() {
			// FastAPI answers a null body as missing before pydantic sees it.
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Type != "missing" {
				t.Errorf("null body: %v", err)
			}
			continue
		}
		if c.OK {
			if err != nil {
				t.Errorf("%.120s: %v", c.Body, err)
				continue
			}
			if err := req.Validate(); err != nil {
				t.Errorf("%.120s: Validate: %v", c.Body, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%.120s: accepted (%v), pydantic rejects it", c.Body, err)
			continue
		}
		want := pyjson.Object(pyjson.M("detail", parse(t, string(c.Detail))))
		if !pyjson.Equal(ve.Detail(), want) {
			t.Errorf("%.120s:\n got %.600s\nwant %.600s", c.Body, pyjson.Dumps(ve.Detail()), pyjson.Dumps(want))
		}
	}
}

func TestDecodeRequestMalformedJSON(t *testing.T) {
	_, err := DecodeRequest([]byte(`{"state": "x", "questions": {"q": {"type": "noul",}}}`))
	var ve *ValidationError
	var se *pyjson.SyntaxError
	if !errors.As(err, &ve) || !errors.As(err, &se) {
		t.Fatalf("got %T %v", err, err)
	}
	b, _ := ve.MarshalJSON()
	want := `{"detail":[{"type":"json_invalid","loc":["body",50],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var pe *pyjson.ParseError
	if _, err := DecodeRequest([]byte("{\"state\": \"\xff\"}")); !errors.As(err, &pe) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	for _, body := range []string{"", "null"} {
		_, err := DecodeRequest([]byte(body))
		if !errors.As(err, &ve) {
			t.Fatalf("%q: %v", body, err)
		}
		if b, _ := ve.MarshalJSON(); string(b) != `{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}` {
			t.Errorf("%q: %s", body, b)
		}
	}
}

func TestDecodeRequestValues(t *testing.T) {
	req, err := DecodeRequest([]byte(`{"questions": {"b": {"type": "noul", "label": "x", "src": 1},
		"a": {"type": "choice", "instructions": {"q": 1.50}, "criteria": {"x": null, "y": "Y", "x": "X2"}},
		"b": {"type": "score", "criteria": [1e2]}}, "state": [1, true]}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != DefaultModel || pyjson.Dumps(req.State) != "[1, true]" || len(req.Questions) != 2 {
		t.Fatalf("request %+v", req)
	}
	// A repeated id keeps its first position and its last value.
	if req.Questions[0].ID != "b" || req.Questions[0].Question.Type != TypeScore || req.Questions[1].ID != "a" {
		t.Fatalf("questions %+v", req.Questions)
	}
	a := req.Questions[1].Question
	if len(a.Options) != 2 || a.Options[0].Name != "x" || a.Options[0].Description.AsString() != "X2" || Render(a.Instructions) != "q: 1.5" {
		t.Fatalf("choice %+v", a)
	}
	if Render(req.Questions[0].Question.Levels[0]) != "100.0" {
		t.Fatal("levels")
	}
	var r2 Request
	if err := json.Unmarshal([]byte(`{"state": "s", "model": "jev-latest", "questions": {"q": {"type": "noul"}}}`), &r2); err != nil || r2.Model != "jev-latest" {
		t.Fatalf("UnmarshalJSON: %v %+v", err, r2)
	}
	if err := json.Unmarshal([]byte(`{"state": "s", "questions": {}}`), &r2); err == nil {
		t.Fatal("UnmarshalJSON accepted an empty question set")
	}
}

func TestRequestJSONRoundTrip(t *testing.T) {
	req := &Request{Model: "m", State: parse(t, `{"doc": "x", "n": 1.0}`), Questions: []QuestionEntry{
		NoulWith("n", "Is it?", "Yes it is", ""),
		Choice("c", "", Opt("a", "first"), Opt("b", "")),
		Score("s", "How much?", "low", "high"),
	}}
	b, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"state":{"doc":"x","n":1.0},"model":"m","questions":{"n":{"type":"noul","instructions":"Is it?","criteria":{"true":"Yes it is","false":null}},"c":{"type":"choice","criteria":{"a":"first","b":null}},"s":{"type":"score","instructions":"How much?","criteria":["low","high"]}}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	back, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := back.MarshalJSON(); string(b2) != want {
		t.Fatalf("round trip %s", b2)
	}
}

func TestValidateGoRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *Request
		path string
	}{
		{"no questions", NewRequest("x"), "questions"},
		{"repeated id", NewRequest("x", Noul("a", ""), Noul("a", "")), "questions.a"},
		{"no options", NewRequest("x", Choice("c", "")), "questions.c.function-after[_check(), Choice]"},
		{"repeated option", NewRequest("x", Choice("c", "", OptionNames("a", "a")...)), "questions.c.function-after[_check(), Choice].criteria"},
		{"no levels", NewRequest("x", Score("s", "")), "questions.s.Score.criteria"},
		{"256 levels", NewRequest("x", Score("s", "", make([]string, 256)...)), "questions.s.Score.criteria"},
		{"unknown type", NewRequest("x", QuestionEntry{ID: "q", Question: Question{Type: "bogus"}}), "questions.q.type"},
	} {
		err := tc.req.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Errors[0].Path() != tc.path {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: message %q does not name %s", tc.name, err, tc.path)
		}
	}
	if err := NewRequest("x", Score("s", "", make([]string, 255)...), Choice("c", "", OptionNames("a")...)).Validate(); err != nil {
		t.Errorf("255 levels and one option: %v", err)
	}
	_, err := DecodeRequest([]byte(`{"state":"x","questions":{"q":{"type":"choice","criteria":{}}}}`))
	if err == nil || !strings.Contains(err.Error(), "Value error, criteria must have 1..255 options") {
		t.Errorf("choice range message: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"state": "x", "questions": {"q": {"type": "noul"}}}`,
		`{"state": {"a": [1, 2.5e3, null]}, "model": "m", "questions": {"c": {"type": "choice", "instructions": {"k": true}, "criteria": {"a": null, "b": "B"}}, "s": {"type": "score", "criteria": ["lo", "hi"]}}}`,
		`{"state": null, "questions": {"n": {"type": "noul", "criteria": {"true": 1, "false": [], "x": 2}}}}`,
		`{"state": "x", "questions": {}}`, `[]`, `{"state": "x", "questions": {"q": {"type": "bogus"}}}`, `{`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRequest(data)
		if err != nil {
			var ve *ValidationError
			var pe *pyjson.ParseError
			if !errors.As(err, &ve) && !errors.As(err, &pe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if ve != nil {
				if _, err := ve.MarshalJSON(); err != nil && !errors.Is(err, pyjson.ErrNonFinite) {
					t.Fatal(err)
				}
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded request does not validate: %v", err)
		}
		// Re-encoding and decoding again is stable.
		b := []byte(pyjson.Dumps(req.Value()))
		req2, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("re-encoded request %s: %v", b, err)
		}
		if !pyjson.Equal(req.Value(), req2.Value()) {
			t.Fatalf("unstable: %s vs %s", b, pyjson.Dumps(req2.Value()))
		}
		if _, err := ToRecord(req, RecordOptions{DateFacts: true}); err != nil {
			t.Fatal(err)
		}
	})
}
