package systemone

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

func parse(t *testing.T, s string) pyjson.Value {
	t.Helper()
	v, err := pyjson.Parse([]byte(s))
	if err != nil {
		t.Fatalf("parse %s: %v", s, err)
	}
	return v
}

func TestRenderSpecVectors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`null`, ""},
		{`{"what": "A", "not_for": "B"}`, "what: A\nnot_for: B"},
		{`["x", "y"]`, "- x\n- y"},
		{`{"ticket": {"channel": "email", "body": "hi"}}`, "ticket:\n  channel: email\n  body: hi"},
		{`{"examples": ["a", "b"]}`, "examples:\n  - a\n  - b"},
		{`[{"a": 1, "b": 2}]`, "- a: 1\n  b: 2"},
		{`[["a", "b"]]`, "- - a\n  - b"},
		{`{"k": null}`, "k: "},
		{`{"k": []}`, "k:\n"},
		{`{"k": {}}`, "k:\n"},
		{`[]`, ""},
		{`{}`, ""},
		{`[true, 1.50, 1e2, 1.0, 12345678901234567890, -0, 1e16, 0.00001]`, "- True\n- 1.5\n- 100.0\n- 1.0\n- 12345678901234567890\n- 0\n- 1e+16\n- 1e-05"},
		{`["  lead", "\n\nx", "\u3000y", "\u200bz"]`, "- lead\n- x\n- y\n- \u200bz"},
		{`{"a": "line1\nline2", "b": [null, {}]}`, "a: line1\nline2\nb:\n  - \n  - "},
		{`"<|box_end|>"`, "<|box_end|>"},
	} {
		if got := Render(parse(t, tc.in)); got != tc.want {
			t.Errorf("Render(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

type semantics struct {
	Render    [][2]json.RawMessage `json:"render"`
	DateFacts [][2]string          `json:"date_facts"`
	Answers   []struct {
		Type    QuestionType `json:"type"`
		Probs   []float32    `json:"probs"`
		Keys    []string     `json:"keys"`
		Compact string       `json:"compact"`
		Dumps   string       `json:"dumps"`
	} `json:"answers"`
}

func loadSemantics(t *testing.T) *semantics {
	t.Helper()
	b, err := os.ReadFile("testdata/semantics.json")
	if err != nil {
		t.Fatal(err)
	}
	var s semantics
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestRenderMatchesPython checks Render against CPython on random JSON content (testdata/gen_semantics.py): big
// integers, float reprs, Unicode whitespace that lstrip removes (and U+200B, which it keeps), nesting.
func TestRenderMatchesPython(t *testing.T) {
	s := loadSemantics(t)
	if len(s.Render) < 100 {
		t.Fatalf("%d render cases", len(s.Render))
	}
	for _, c := range s.Render {
		var want string
		if err := json.Unmarshal(c[1], &want); err != nil {
			t.Fatal(err)
		}
		if got := Render(parse(t, string(c[0]))); got != want {
			t.Errorf("Render(%s) = %q, CPython %q", c[0], got, want)
		}
	}
}

func TestOptionText(t *testing.T) {
	for _, tc := range []struct {
		desc string
		want string
	}{
		{`null`, "calm"}, {`""`, "calm"}, {`"Hostile"`, "calm: Hostile"}, {`0`, "calm: 0"}, {`false`, "calm: False"},
		{`[]`, "calm: "}, {`{}`, "calm: "}, {`" "`, "calm:  "}, {`{"what": "A", "not_for": "B"}`, "calm: what: A\nnot_for: B"},
		{`0.0`, "calm: 0.0"},
	} {
		if got := OptionText("calm", parse(t, tc.desc)); got != tc.want {
			t.Errorf("OptionText(calm, %s) = %q, want %q", tc.desc, got, tc.want)
		}
	}
}

func TestToRecordSpecVector(t *testing.T) {
	req, err := DecodeRequest([]byte(`{"state": {"document": "I was charged twice."}, "model": "m", "questions": {
		"billing": {"type": "noul", "instructions": "About billing?", "criteria": {"true": "Charges", "false": "Not charges"}},
		"tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": null, "angry": "Hostile"}},
		"urgency": {"type": "score", "instructions": "Urgency?", "criteria": ["can wait", "today"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, req)
	if rec.State != "document: I was charged twice." {
		t.Errorf("state %q", rec.State)
	}
	var opts, keys [][]string
	var types []QuestionType
	for _, q := range rec.Questions {
		opts = append(opts, q.Options)
		keys = append(keys, q.Keys)
		types = append(types, q.Type)
	}
	if want := [][]string{{"no: Not charges", "yes: Charges"}, {"calm", "angry: Hostile"}, {"can wait", "today"}}; !reflect.DeepEqual(opts, want) {
		t.Errorf("options %q", opts)
	}
	if want := []QuestionType{TypeNoul, TypeChoice, TypeScore}; !reflect.DeepEqual(types, want) {
		t.Errorf("types %v", types)
	}
	if want := [][]string{{"false", "true"}, {"calm", "angry"}, {"0", "1"}}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %q", keys)
	}
	if want := []LegendEntry{{"0", "can wait"}, {"1", "today"}}; !reflect.DeepEqual(rec.Questions[2].Legend, want) {
		t.Errorf("legend %v", rec.Questions[2].Legend)
	}
	if rec.Questions[0].Instr != "About billing?" || rec.Questions[1].ID != "tone" {
		t.Errorf("questions %+v", rec.Questions)
	}
}

func TestToRecordDefaults(t *testing.T) {
	req, err := DecodeRequest([]byte(`{"state": null, "questions": {"n": {"type": "noul", "criteria": {"true": null, "other": 1}},
		"s": {"type": "score", "criteria": [1, 2, null, {"a": [true]}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, req)
	if rec.State != "" || rec.Questions[0].Instr != "" || !reflect.DeepEqual(rec.Questions[0].Options, []string{"no", "yes"}) {
		t.Errorf("record %+v", rec)
	}
	if want := []LegendEntry{{"0", "1"}, {"1", "2"}, {"2", ""}, {"3", "a:\n  - True"}}; !reflect.DeepEqual(rec.Questions[1].Legend, want) {
		t.Errorf("legend %q", rec.Questions[1].Legend)
	}
	if _, err := ToRecord(&Request{State: pyjson.String("x")}, RecordOptions{}); err == nil {
		t.Error("a request without questions must not make a record")
	}
}
