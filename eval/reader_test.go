package eval

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kevgo/kev"
)

const team = `"team": {"type": "choice", "criteria": {"billing": "Charges", "shipping": null}}`
const urgent = `"urgent": {"type": "noul", "instructions": "Today?"}`
const level = `"level": {"type": "score", "criteria": ["low", "mid", "high"]}`

func TestReadExamples(t *testing.T) {
	in := "\ufeff" + `{"state": "s1", "questions": {` + team + `, ` + urgent + `, ` + level + `}, "expected": {"team": "shipping", "urgent": true, "level": 2}}` + "\n" +
		"\n   \n" +
		`{"state": {"a": 1}, "_meta": {"id": "x"}, "questions": {"team": {"type": "choice", "criteria": {"billing": "Charges", "shipping": null}, "label": "billing", "src": "custom_choice"}, ` +
		urgent + `}}` + "\n" +
		`{"state": null, "questions": {` + level + `, ` + urgent + `}, "expected": {"level": 0}}` + "\n" +
		`{"state": "s", "questions": {` + team + `, ` + urgent + `, ` + level + `}, "_meta": {"id": "suite_000001", "gold": {"team": {"type": "choice", "label": "billing"}, ` +
		`"urgent": {"type": "noul", "label": "true", "probability_true": 0.7}, "level": {"type": "score", "label": "1"}, "gone": {"label": "x"}}}}`
	exs, err := ReadExamples(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, ex := range exs {
		got += fmt.Sprintf("%d:%d:%v ", ex.Line, len(ex.Request.Questions), ex.Expected)
	}
	if want := "1:3:map[level:2 team:1 urgent:1] 4:2:map[team:0] 5:2:map[level:0] 6:3:map[level:1 team:0 urgent:1] "; got != want {
		t.Errorf("examples %q, want %q", got, want)
	}
}

func TestReadExamplesErrors(t *testing.T) {
	ok := `{"state": "s", "questions": {` + team + `}, "expected": {"team": "billing"}}`
	for _, tc := range []struct {
		name, line, field string
		validation        bool
	}{
		{"not JSON", `{"state": `, "", false},
		{"not an object", `[1, 2]`, "", false},
		{"no questions", `{"state": "s", "expected": {}}`, "", true},
		{"bad question", `{"state": "s", "questions": {"q": {"type": "choice"}}, "expected": {"q": "a"}}`, "", true},
		{"expected not an object", `{"state": "s", "questions": {` + team + `}, "expected": ["billing"]}`, "expected", false},
		{"unknown question", `{"state": "s", "questions": {` + team + `}, "expected": {"tema": "billing"}}`, "expected.tema", false},
		{"unknown option", `{"state": "s", "questions": {` + team + `}, "expected": {"team": "returns"}}`, "expected.team", false},
		{"choice index", `{"state": "s", "questions": {` + team + `}, "expected": {"team": 0}}`, "expected.team", false},
		{"noul string", `{"state": "s", "questions": {` + urgent + `}, "expected": {"urgent": "true"}}`, "expected.urgent", false},
		{"score float", `{"state": "s", "questions": {` + level + `}, "expected": {"level": 1.0}}`, "expected.level", false},
		{"score too high", `{"state": "s", "questions": {` + level + `}, "expected": {"level": 3}}`, "expected.level", false},
		{"score negative", `{"state": "s", "questions": {` + level + `}, "expected": {"level": -1}}`, "expected.level", false},
		{"bad label", `{"state": "s", "questions": {"urgent": {"type": "noul", "label": 1}}}`, "questions.urgent.label", false},
		{"label disagrees", `{"state": "s", "questions": {"urgent": {"type": "noul", "label": true}}, "expected": {"urgent": false}}`, "questions.urgent.label", false},
		{"gold noul", `{"state": "s", "questions": {` + urgent + `}, "_meta": {"gold": {"urgent": {"label": "yes"}}}}`, "_meta.gold.urgent.label", false},
		{"gold score", `{"state": "s", "questions": {` + level + `}, "_meta": {"gold": {"level": {"label": "01"}}}}`, "_meta.gold.level.label", false},
		{"gold disagrees", `{"state": "s", "questions": {` + level + `}, "expected": {"level": 2}, "_meta": {"gold": {"level": {"label": "1"}}}}`, "_meta.gold.level.label", false},
		{"nothing labelled", `{"state": "s", "questions": {` + team + `}}`, "expected", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadExamples(strings.NewReader(ok + "\n" + ok + "\n" + tc.line + "\n" + ok))
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %v, want a *LineError", err)
			}
			if le.Line != 3 || le.Field != tc.field {
				t.Errorf("line %d field %q, want line 3 field %q (%v)", le.Line, le.Field, tc.field, err)
			}
			var ve *kev.ValidationError
			if errors.As(err, &ve) != tc.validation {
				t.Errorf("validation error: %v, want %v (%v)", !tc.validation, tc.validation, err)
			}
			if !strings.Contains(err.Error(), "line 3") {
				t.Errorf("message %q does not name the line", err)
			}
		})
	}
}

// FuzzReadExamples: any input reads without panicking; what reads has an expected class inside every labelled
// question's classes, and what does not is a *LineError naming a line of the input.
func FuzzReadExamples(f *testing.F) {
	f.Add([]byte(`{"state": "s", "questions": {` + team + `, ` + urgent + `, ` + level + `}, "expected": {"team": "shipping", "urgent": true, "level": 2}}`))
	f.Add([]byte(`{"state": "s", "questions": {"urgent": {"type": "noul", "label": false}}}` + "\n\n" + `{"state": 1}`))
	f.Add([]byte(`{"state": "s", "questions": {` + level + `}, "expected": {"level": 99999999999999999999999}}`))
	f.Add([]byte("\ufeff{}\n[]\nnull"))
	f.Add([]byte(`{"state": "s", "questions": {` + level + `}, "_meta": {"gold": {"level": {"label": "2"}}}}`))
	f.Add([]byte(`{"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": 1}, "label": "a"}}, "expected": {"q": "a"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		exs, err := ReadExamples(strings.NewReader(string(data)))
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %T %v, want a *LineError", err, err)
			}
			if le.Line < 1 || le.Line > strings.Count(string(data), "\n")+1 {
				t.Fatalf("line %d outside the input", le.Line)
			}
			return
		}
		for _, ex := range exs {
			if len(ex.Expected) == 0 {
				t.Fatalf("line %d: nothing labelled", ex.Line)
			}
			for _, e := range ex.Request.Questions {
				k, ok := ex.Expected[e.ID]
				if ok && (k < 0 || k >= len(Keys(e.Question))) {
					t.Fatalf("line %d: %s: class %d of %d", ex.Line, e.ID, k, len(Keys(e.Question)))
				}
			}
		}
	})
}
