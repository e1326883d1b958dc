package kev

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/tensor"
)

type ticket struct {
	Channel string  `json:"channel"`
	Amount  float64 `json:"amount"`
	Skip    string  `json:"-"`
}

func TestValueOf(t *testing.T) {
	var nilMap map[string]int
	var nilPtr *int
	seven := 7
	cyclic := []any{nil}
	cyclic[0] = cyclic
	for _, c := range []struct {
		name     string
		in       any
		json     string // ERR: marshalling fails
		rendered string
		err      bool
	}{
		{"nil", nil, `null`, ``, false},
		{"true", true, `true`, `True`, false},
		{"string", "hi", `"hi"`, `hi`, false},
		{"empty string", "", `""`, ``, false},
		{"int", 42, `42`, `42`, false},
		{"int8", int8(-3), `-3`, `-3`, false},
		{"uint64 max", uint64(math.MaxUint64), `18446744073709551615`, `18446744073709551615`, false},
		{"float integral", 100.0, `100.0`, `100.0`, false},
		{"float", 1.5, `1.5`, `1.5`, false},
		{"float32 shortest", float32(0.1), `0.1`, `0.1`, false},
		{"big float", 1e22, `1e+22`, `1e+22`, false},
		{"NaN", math.NaN(), ``, ``, true},
		{"Inf", math.Inf(-1), ``, ``, true},
		{"json.Number float", json.Number("1e2"), `100.0`, `100.0`, false},
		{"json.Number int", json.Number("12"), `12`, `12`, false},
		{"raw NaN (read as Python does; not written back)", json.RawMessage(`{"x": NaN}`), `ERR`, `x: nan`, false},
		{"raw malformed", json.RawMessage(`{"x"`), ``, ``, true},
		{"big.Int", new(big.Int).Lsh(big.NewInt(1), 70), `1180591620717411303424`, `1180591620717411303424`, false},
		{"pointer", &seven, `7`, `7`, false},
		{"nil pointer", nilPtr, `null`, ``, false},
		{"nil map", nilMap, `null`, ``, false},
		{"map sorted", map[string]any{"b": 1, "a": []int{1, 2}, "c": map[string]bool{"z": false}},
			`{"a":[1,2],"b":1,"c":{"z":false}}`, "a:\n  - 1\n  - 2\nb: 1\nc:\n  z: False", false},
		{"object ordered", Object{{Key: "z", Value: 1}, {Key: "a", Value: nil}, {Key: "m", Value: Object{}}},
			`{"z":1,"a":null,"m":{}}`, "z: 1\na: \nm:\n", false},
		{"array", [2]string{"x", "y"}, `["x","y"]`, "- x\n- y", false},
		{"empty slice", []int{}, `[]`, ``, false},
		{"bytes", []byte("hi"), `"aGk="`, `aGk=`, false},
		{"struct via encoding/json", ticket{Channel: "email", Amount: 3, Skip: "x"}, `{"channel":"email","amount":3}`,
			"channel: email\namount: 3", false},
		{"Value", Text("t"), `"t"`, `t`, false},
		{"non-string map keys", map[int]string{2: "b", 1: "a"}, `{"1":"a","2":"b"}`, "1: a\n2: b", false},
		{"NaN nested", map[string]any{"k": []float64{math.NaN()}}, ``, ``, true},
		{"cycle", cyclic, ``, ``, true},
		{"func", func() {}, ``, ``, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := ValueOf(c.in)
			if c.err {
				if err == nil || !strings.HasPrefix(err.Error(), "kev: ValueOf: ") {
					t.Fatalf("got %v, %v; want an error", v, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := v.String(); got != c.rendered {
				t.Errorf("rendered %q, want %q", got, c.rendered)
			}
			b, err := json.Marshal(v)
			if c.json == "ERR" {
				if err == nil {
					t.Errorf("marshalled to %s, want an error", b)
				}
				return
			}
			if err != nil || string(b) != c.json {
				t.Errorf("json %s, %v; want %s", b, err, c.json)
			}
			var back Value
			if err := json.Unmarshal(b, &back); err != nil || back.String() != c.rendered {
				t.Errorf("round trip %q, %v", back.String(), err)
			}
		})
	}
}

func TestTextNull(t *testing.T) {
	if b, _ := Text("").MarshalJSON(); string(b) != "null" {
		t.Errorf("Text(\"\") = %s, want null", b)
	}
	var zero Value
	if b, _ := zero.MarshalJSON(); string(b) != "null" || zero.String() != "" {
		t.Errorf("zero Value = %s %q", b, zero.String())
	}
}

// TestValidationErrorsReadNaturally checks the problems of a refused request name fields without pydantic's schema
// names, one problem per thing wrong.
func TestValidationErrorsReadNaturally(t *testing.T) {
	for _, c := range []struct {
		body string
		want []Problem
	}{
		{`{"state":"x","questions":{"q":{"type":"score","criteria":[]}}}`,
			[]Problem{{"questions.q.criteria", "list should have at least 1 item after validation, not 0"}}},
		{`{"state":"x","questions":{"q":{"type":"choice","criteria":[1]}}}`,
			[]Problem{{"questions.q.criteria", "input should be a valid dictionary"}}},
		{`{"state":"x","questions":{"q":{"type":"choice","criteria":{}}}}`,
			[]Problem{{"questions.q", "criteria must have 1..255 options"}}},
		{`{"state":"x","questions":{"q":{"type":"yesno"}}}`,
			[]Problem{{"questions.q.type", `must be "noul", "choice" or "score"`}}},
		{`{"state":"x","questions":{"q":{"instructions":"?"}}}`,
			[]Problem{{"questions.q.type", `missing; want "noul", "choice" or "score"`}}},
		{`{"state":"x","questions":{"q":[]}}`,
			[]Problem{{"questions.q", `must be an object with a type: "noul", "choice" or "score"`}}},
		{`{"questions":{}}`,
			[]Problem{{"state", "field required"}, {"questions", "dictionary should have at least 1 item after validation, not 0"}}},
		{`{"state":"x","model":3,"questions":{"q":{"type":"noul"}}}`,
			[]Problem{{"model", "input should be a valid string"}}},
		{`[1]`,
			[]Problem{{"", "input should be a valid dictionary or instance of SystemOneRequest"}}},
		{`{"state": }`,
			[]Problem{{"", "malformed JSON at character 10: Expecting value"}}},
	} {
		var r Request
		err := r.UnmarshalJSON([]byte(c.body))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a *ValidationError", c.body, err)
			continue
		}
		if len(ve.Problems) != len(c.want) {
			t.Errorf("%s: problems %+v, want %+v", c.body, ve.Problems, c.want)
			continue
		}
		for i := range c.want {
			if ve.Problems[i] != c.want[i] {
				t.Errorf("%s: problem %d = %+v, want %+v", c.body, i, ve.Problems[i], c.want[i])
			}
		}
		for _, bad := range []string{"function-after", "Score.", "Noul.", "Value error"} {
			if strings.Contains(err.Error(), bad) {
				t.Errorf("%s: error %q names %q", c.body, err, bad)
			}
		}
	}
	// Requests built in Go are checked the same way, before anything reaches the model (so a predictor without
	// one will do).
	r := NewRequest("s", Choice("q", "?", Opt("a", ""), Opt("a", "")), Noul("q", "?"))
	var ve *ValidationError
	_, err := (&Predictor{}).Do(context.Background(), r)
	if !errors.As(err, &ve) || len(ve.Problems) != 2 {
		t.Fatalf("%v", err)
	}
	if ve.Problems[0].Field != "questions.q.criteria" || !strings.Contains(ve.Problems[0].Msg, `option "a" is repeated`) ||
		ve.Problems[1].Field != "questions.q" || !strings.Contains(ve.Problems[1].Msg, `question id "q" is repeated`) {
		t.Errorf("%+v", ve.Problems)
	}
}

// cudaRegistered reports whether this test binary has the CUDA backend (built with -tags cuda).
func cudaRegistered() bool { return slices.Contains(tensor.Backends(), "cuda") }

func TestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opts  Options
		field string
	}{
		{Options{Device: "tpu"}, "Device"},
		{Options{Device: "cuda:x"}, "Device"},
		{Options{Device: "cpu:1"}, "Device"},
		{Options{Device: "cuda:-1"}, "Device"},
		{Options{Device: "cpu,cuda"}, "Device"},
		{Options{Device: "cpu,"}, "Device"},
		{Options{Device: "cpu:0,,0"}, "Device"},
		{Options{Device: ":0"}, "Device"},
		{Options{Device: "cpu:all,x"}, "Device"},
		{Options{MaxQuestions: -1}, "MaxQuestions"},
		{Options{PassTokens: -1}, "PassTokens"},
		{Options{PassTokens: maxPassTokens + 1}, "PassTokens"},
		{Options{CUDAGraphs: 4}, "CUDAGraphs"}, // the CPU backend has no graphs
		{Options{DType: "fp8"}, "DType"},
		{Options{DType: "fp16", Device: CUDA}, fp16Field()}, // fp16 compute is CPU only
		{Options{Temperature: -1}, "Temperature"},
	} {
		_, err := Load(context.Background(), "testdata/golden/tiny-a/kev", c.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != c.field {
			t.Errorf("%+v: %v, want an *OptionError on %s", c.opts, err, c.field)
		}
	}
	// A program without the CUDA backend says how to get it.
	_, err := Load(context.Background(), "testdata/golden/tiny-a/kev", Options{Device: CUDA})
	if want := `tensor/cuda" and a build with -tags cuda`; !cudaRegistered() && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Errorf("%v, want it to say %q", err, want)
	}
	for _, c := range []struct {
		in   DType
		want DType
	}{{"fp32", Float32}, {"FLOAT32", Float32}, {"bf16", BFloat16}, {BFloat16, BFloat16}} {
		if _, got, err := parseDType(c.in, string(CPU)); err != nil || got != c.want {
			t.Errorf("%q: %q %v", c.in, got, err)
		}
	}
	if _, got, _ := parseDType("", string(CPU)); got != Float32 {
		t.Errorf("cpu default %q", got)
	}
	if _, got, _ := parseDType("", "cuda"); got != BFloat16 {
		t.Errorf("cuda default %q", got)
	}
	// The CUDA backend computes with bf16 weights and activations: fp32 there is refused, not rounded to bf16.
	for _, in := range []DType{"fp32", Float32, "FLOAT32"} {
		_, _, err := parseDType(in, string(CUDA))
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != "DType" || !strings.Contains(oe.Reason, "cpu device only") {
			t.Errorf("parseDType(%q, cuda): %v, want an *OptionError on DType saying fp32 is the cpu device's", in, err)
		}
	}
}

// TestAskStructuredState checks a state given as Go values is answered as the same JSON body is: Ask with a map, an
// Object and a Value read from the body all give the body's answers, bit for bit.
func TestAskStructuredState(t *testing.T) {
	p, err := Load(context.Background(), "testdata/golden/tiny-a/kev", Options{Base: "testdata/golden/tiny-a/base", Offline: true})
	if err != nil {
		t.Skip("golden fixture not loadable:", err)
	}
	defer p.Close()
	body := `{"state":{"amount":100.0,"customer":{"name":"Ann","vip":true},"items":["shoes",2]},` +
		`"questions":{"refund":{"type":"noul","instructions":"Is a refund asked for?"},` +
		`"team":{"type":"choice","instructions":"Which team?","criteria":{"returns":"Exchanges","billing":null}}}}`
	var req Request
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	resp, err := p.Do(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(resp.Answers[0].Answer)
	want2, _ := json.Marshal(resp.Answers[1].Answer)
	qs := []QuestionEntry{Noul("refund", "Is a refund asked for?"),
		Choice("team", "Which team?", Opt("returns", "Exchanges"), Opt("billing", ""))}
	for name, state := range map[string]any{
		"map": map[string]any{"items": []any{"shoes", 2}, "amount": 100.0, "customer": map[string]any{"vip": true, "name": "Ann"}},
		"object": Object{{Key: "amount", Value: 100.0}, {Key: "customer", Value: Object{{Key: "name", Value: "Ann"}, {Key: "vip", Value: true}}},
			{Key: "items", Value: []any{"shoes", 2}}},
		"value": req.State,
	} {
		got, err := p.Ask(context.Background(), state, qs...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g, _ := json.Marshal(got[0].Answer)
		g2, _ := json.Marshal(got[1].Answer)
		if string(g) != string(want) || string(g2) != string(want2) || got[0].ID != "refund" {
			t.Errorf("%s: %s %s, want %s %s", name, g, g2, want, want2)
		}
	}
	if _, err := p.Ask(context.Background(), math.NaN(), qs...); err == nil {
		t.Error("NaN state: no error")
	}
}

// FuzzRequestUnmarshalJSON checks any body is either refused with an error that reads (problems for a
// *ValidationError) or read into a request that marshals back into a body read the same way.
func FuzzRequestUnmarshalJSON(f *testing.F) {
	f.Add(`{"state":"s","questions":{"q":{"type":"noul"}}}`)
	f.Add(`{"state":{"a":[1,2.0,NaN]},"model":"m","questions":{"c":{"type":"choice","criteria":{"x":null,"y":{"z":1}}}}}`)
	f.Add(`{"state":"x","questions":{"q":{"type":"score","criteria":[]}}}`)
	f.Add(`{"state":"x","questions":{"q":[]},"model":3}`)
	f.Add(`{"state": }`)
	f.Fuzz(func(t *testing.T, body string) {
		var r Request
		err := r.UnmarshalJSON([]byte(body))
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				if len(ve.Problems) == 0 || ve.Error() == "" {
					t.Fatalf("validation error with no problems: %v", err)
				}
				for _, p := range ve.Problems {
					if p.Msg == "" || strings.Contains(p.Field, "function-after") {
						t.Fatalf("problem %+v", p)
					}
				}
			}
			return
		}
		b, err := r.MarshalJSON()
		if err != nil {
			return // NaN and infinities are read but not written, as in Python's server
		}
		var back Request
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatalf("%s: re-reading %s: %v", body, b, err)
		}
		b2, err := back.MarshalJSON()
		if err != nil || string(b2) != string(b) {
			t.Fatalf("%s: %s then %s (%v)", body, b, b2, err)
		}
	})
}

func TestDefaultModelIsKevs(t *testing.T) {
	if DefaultModel != systemone.DefaultModel {
		t.Errorf("%q, the protocol's %q", DefaultModel, systemone.DefaultModel)
	}
}

// fp16Field is the Options field that Load refuses for fp16 weights on CUDA: DType where the CUDA backend is in the
// program (fp16 compute is CPU only), Device where it is not.
func fp16Field() string {
	if slices.Contains(tensor.Backends(), string(CUDA)) {
		return "DType"
	}
	return "Device"
}

// TestPassTokensOption checks Options.PassTokens reaches every replica's pass and batch budgets, and that 0 keeps
// Kev's.
// TestCUDAGraphsOffOnCPU checks that turning graphs off (CUDAGraphs < 0) is accepted where there are none.
func TestCUDAGraphsOffOnCPU(t *testing.T) {
	p, err := Load(context.Background(), "testdata/golden/tiny-a/kev", Options{Base: "testdata/golden/tiny-a/base", Offline: true, CUDAGraphs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st := p.Stats(); st.Graphs != nil {
		t.Errorf("graph counters %+v on the CPU", *st.Graphs)
	}
}

func TestPassTokensOption(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, systemone.RowPassTokens}, {200, 200}} {
		p, err := Load(context.Background(), "testdata/golden/tiny-a/kev", Options{Base: "testdata/golden/tiny-a/base", Offline: true, PassTokens: c.in})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.engines {
			if e.passTokens != c.want || e.sliceTokens != c.want {
				t.Errorf("PassTokens %d: pass %d, batch %d tokens, want %d", c.in, e.passTokens, e.sliceTokens, c.want)
			}
		}
		p.Close()
	}
}
