package systemone

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

// TestQuestionIDBound (question ids): a question id over MaxQuestionIDBytes is refused before anything is
// rendered or tokenised, by ToRecord, Separate and Permute alike, with a 422 detail that does not echo it; an id
// at the limit is accepted. A 30 MB id used to cost 7.6 s and 2.69 GB to count the answers' tokens.
func TestQuestionIDBound(t *testing.T) {
	long := strings.Repeat("é", 15<<20) // 30 MiB
	req := &Request{Model: DefaultModel, State: pyjson.String("s"), Questions: []QuestionEntry{
		{ID: "a", Question: Question{Type: TypeNoul}},
		{ID: long, Question: Question{Type: TypeChoice, Options: []Option{{Name: "x"}, {Name: "y"}}}},
	}}
	want := "question 1 has an id of 31,457,280 bytes, over this server's limit of 4,096 bytes"
	check := func(name string, err error) {
		t.Helper()
		var ie *QuestionIDTooLongError
		if !errors.As(err, &ie) || ie.Bytes != len(long) || ie.Question != 1 {
			t.Fatalf("%s: %v, want a QuestionIDTooLongError", name, err)
		}
		if d, ok := AdmissionDetail(err); !ok || d != want {
			t.Errorf("%s: detail %q, %v; want %q", name, d, ok, want)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ToRecord(req, RecordOptions{})
	runtime.ReadMemStats(&after)
	check("ToRecord", err)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing the id allocated %d bytes, want under 1 MiB", alloc)
	}
	calls := 0
	do := func(context.Context, *Request) (*Response, error) { calls++; return nil, errors.New("not reached") }
	_, err = Separate(context.Background(), do, req, nil)
	check("Separate", err)
	_, err = Permute(context.Background(), do, &PermuteRequest{Request: req, Question: long, NPerm: 2})
	check("Permute", err)
	if calls != 0 {
		t.Errorf("%d parts sent for a refused request", calls)
	}
	req.Questions[1].ID = strings.Repeat("i", MaxQuestionIDBytes)
	if _, err := ToRecord(req, RecordOptions{}); err != nil {
		t.Fatalf("an id of %d bytes: %v", MaxQuestionIDBytes, err)
	}
}

// TestOutputTokensCounts: with a tokenizer that counts (the tokenizer package's), the usage's output tokens are
// counted chunk by chunk, exactly Kev's count (the ids of the whole dumps text, which the path without Count
// takes).
func TestOutputTokensCounts(t *testing.T) {
	tok := qwen3(t)
	var answers []AnswerEntry
	for i := range 2000 {
		answers = append(answers, AnswerEntry{ID: "question " + commaInt(i) + " naïve <|box_end|> 日本語",
			Answer: Answer{Type: TypeChoice, Choice: "x", Confidence: 0.5,
				Probabilities: []Prob{{Key: "x", P: 0.5}, {Key: "y", P: 0.25}, {Key: "z é", P: 0.25}}}})
	}
	want := len(tok.Encode(pyjson.Dumps(AnswersValue(answers))))
	if got := OutputTokens(tok, answers); got != want || got < len(answers)*10 {
		t.Fatalf("OutputTokens = %d, want %d", got, want)
	}
	if got := OutputTokens(plainTokenizer{tok}, answers); got != want {
		t.Fatalf("OutputTokens without Count = %d, want %d", got, want)
	}
}
