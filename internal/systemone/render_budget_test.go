package systemone

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

// renderRef is Kev's render written as Kev writes it, each level returning its text for its parent to copy: the
// reference Render must agree with, byte for byte.
func renderRef(v pyjson.Value, indent int) string {
	switch v.Kind() {
	case pyjson.KindNull:
		return ""
	case pyjson.KindArray:
		lines := make([]string, 0, v.Len())
		for _, x := range v.Elems() {
			lines = append(lines, strings.Repeat("  ", indent)+"- "+lstrip(renderRef(x, indent+1)))
		}
		return strings.Join(lines, "\n")
	case pyjson.KindObject:
		lines := make([]string, 0, v.Len())
		for _, m := range v.Members() {
			if m.Value.IsContainer() {
				lines = append(lines, strings.Repeat("  ", indent)+m.Key+":\n"+renderRef(m.Value, indent+1))
			} else {
				lines = append(lines, strings.Repeat("  ", indent)+m.Key+": "+renderRef(m.Value, 0))
			}
		}
		return strings.Join(lines, "\n")
	}
	return v.Str()
}

var renderCases = []string{
	`null`, `"x"`, `[]`, `{}`, `[[[]]]`, `[[null, "a"]]`, `[{"": 1}]`, `[{" \t": [1]}]`, `[{"  ": {}}, " y"]`,
	`{"a": [{"b": [" c", {"  d": ["\u3000e"]}]}], "f": {"g": {}}}`, `[["", ["  ", [" \n x"]]]]`,
	`[{"\u2028k": null}, [], {}, [[]], ["\t"]]`, `{"k": [[[" z"]]], "": [""]}`,
}

// TestRenderAgreesWithReference: the one-buffer renderer writes exactly Kev's text, element lstrip included
// (whitespace keys, empty containers and whitespace strings at the start of an element).
func TestRenderAgreesWithReference(t *testing.T) {
	for _, in := range renderCases {
		v := parse(t, in)
		want := renderRef(v, 0)
		if got := Render(v); got != want {
			t.Errorf("Render(%s) = %q, want %q", in, got, want)
		}
		for k := 0; k <= len(want)+1; k++ {
			got, over := RenderLimit(v, k)
			if over != (len(want) > k) || got != want[:min(k, len(want))] {
				t.Fatalf("RenderLimit(%s, %d) = %q, %v; want %q, %v", in, k, got, over, want[:min(k, len(want))], len(want) > k)
			}
		}
	}
}

// nestBomb returns a render bomb: depth objects nested around an array of n zeros. Kev
// renders each zero on a line indented 2·depth spaces, so a body of about 6·depth + 2·n bytes renders to about
// 2·depth·n bytes (26 KB rendered 20 MB, and each level used to copy its child's text again).
func nestBomb(depth, n int) []byte {
	var b strings.Builder
	for range depth {
		b.WriteString(`{"a":`)
	}
	b.WriteString("[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]")
	b.WriteString(strings.Repeat("}", depth))
	return []byte(b.String())
}

// countingTokenizer counts the bytes it is asked to encode.
type countingTokenizer struct {
	*fakeTokenizer
	bytes int
}

func (c *countingTokenizer) Encode(text string) []int {
	c.bytes += len(text)
	return c.fakeTokenizer.Encode(text)
}

// TestRenderBomb (render bomb): a 206 KB body that Kev renders to about 200 MB (199,381,091 tokens) is refused
// with its text rendered only to the state's budget and none of it tokenised, and the memory allocated to render
// it is a small multiple of the budget; under truncation its first bytes are read.
func TestRenderBomb(t *testing.T) {
	body := []byte(`{"state":` + string(nestBomb(990, 100_000)) + `,"questions":{"q":{"type":"noul"}}}`)
	req, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec, err := ToRecord(req, RecordOptions{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte body: %d bytes rendered, %d KiB allocated", len(body), len(rec.State), alloc>>10)
	if !rec.StateCut || len(rec.State) != DefaultMaxStateBytes || rec.StateBytes != DefaultMaxStateBytes {
		t.Fatalf("state cut %v at %d bytes (%d), want cut at %d", rec.StateCut, len(rec.State), rec.StateBytes, DefaultMaxStateBytes)
	}
	if alloc > 3*DefaultMaxStateBytes {
		t.Errorf("rendering allocated %d bytes, want under %d", alloc, 3*DefaultMaxStateBytes)
	}
	tok := &countingTokenizer{fakeTokenizer: newFakeTokenizer()}
	_, err = Encode(tok, rec, EncodeOptions{})
	var se *StateTooLongError
	if !errors.As(err, &se) {
		t.Fatalf("Encode: %v, want a StateTooLongError", err)
	}
	want := "state renders to more than 8,388,608 bytes, over the 65,536-token limit (the <state> token included): shorten the document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only its first 65,536 tokens (responses then say truncated: true)"
	if se.Detail() != want {
		t.Errorf("detail %q\nwant   %q", se.Detail(), want)
	}
	if d, ok := AdmissionDetail(err); !ok || d != want {
		t.Errorf("AdmissionDetail = %q, %v", d, ok)
	}
	if tok.bytes != 0 {
		t.Errorf("%d bytes tokenised for a state refused by its render budget", tok.bytes)
	}
	// Under truncation the state's first tokens are read from the text rendered (a 256-token state limit, whose
	// budget is 256 tokens of MaxTokenBytes).
	small, err := ToRecord(req, RecordOptions{MaxStateBytes: 256 * MaxTokenBytes})
	if err != nil || !small.StateCut {
		t.Fatalf("ToRecord with a 32 KiB state budget: %v", err)
	}
	enc, err := Encode(tok, small, EncodeOptions{Truncate: true, MaxState: 256})
	if err != nil || !enc.Truncated || enc.StateLen != 256 {
		t.Fatalf("truncate: %v, state %d tokens read, truncated %v", err, enc.StateLen, enc.Truncated)
	}
	if want := Render(parse(t, string(nestBomb(990, 100)))); !strings.HasPrefix(rec.State, want[:len(want)-20]) {
		t.Errorf("the budgeted text is not the start of the state's text")
	}
}

// TestRenderBombSmall (render bomb, the 26 KB body): a state within the budget renders whole, once; rendering
// allocates a small multiple of its text, not a copy a level (990 levels).
func TestRenderBombSmall(t *testing.T) {
	v, err := pyjson.Parse(nestBomb(990, 1000))
	if err != nil {
		t.Fatal(err)
	}
	var text string
	allocs := testing.AllocsPerRun(3, func() { text = Render(v) })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text = Render(v)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if want := strings.Repeat(" ", 2*990) + "- 0\n"; !strings.Contains(text, want) || len(text) < 1000*len(want) {
		t.Fatalf("rendered %d bytes, want 1,000 lines of %q", len(text), want)
	}
	if maxAllocs := float64(len(text)/renderChunk + 16); alloc > uint64(3*len(text)) || allocs > maxAllocs {
		t.Errorf("rendering %d bytes allocated %d bytes in %.0f allocations, want under %d bytes and %.0f", len(text), alloc, allocs, 3*len(text), maxAllocs)
	}
}

// TestRenderBudgetQuestions: a question rendered past its budget is refused as over the row limit; a request past
// the total render budget gets a RenderTooLargeError; texts within the budgets render as Kev's.
func TestRenderBudgetQuestions(t *testing.T) {
	bomb := string(nestBomb(100, 1000)) // ~200 KB of text
	body := `{"state":"s","questions":{"a":{"type":"noul","instructions":` + bomb + `},"b":{"type":"noul"}}}`
	req, err := DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ToRecord(req, RecordOptions{MaxQuestionBytes: 10_000})
	if err != nil || !rec.Questions[0].Cut || rec.Questions[1].Cut {
		t.Fatalf("ToRecord: %v, cut %v", err, rec != nil && rec.Questions[0].Cut)
	}
	_, err = Encode(newFakeTokenizer(), rec, EncodeOptions{})
	var re *RowTooLongError
	if !errors.As(err, &re) || re.ID != "a" || re.Error() != "branch too long: more than 10000 bytes of text with a 2-token state (row limit 73728)" {
		t.Fatalf("Encode: %v", err)
	}
	_, err = ToRecord(req, RecordOptions{MaxBytes: 50_000})
	var te *RenderTooLargeError
	if !errors.As(err, &te) || te.Limit != 50_000 {
		t.Fatalf("ToRecord with a 50,000-byte total: %v", err)
	}
	if d, ok := AdmissionDetail(err); !ok || d != "the request renders to more than 50,000 bytes of text, over this server's limit: split its questions across requests" {
		t.Errorf("detail %q", d)
	}
	rec, err = ToRecord(req, RecordOptions{})
	if err != nil || rec.Questions[0].Instr != renderRef(parse(t, bomb), 0) || rec.Questions[0].Cut {
		t.Fatalf("default budgets: %v", err)
	}
}

// FuzzRender: for any JSON, Render is Kev's text (renderRef) and RenderLimit its prefix at any budget.
func FuzzRender(f *testing.F) {
	for _, c := range renderCases {
		f.Add(c, uint16(7))
	}
	f.Add(string(nestBomb(40, 30)), uint16(500))
	f.Fuzz(func(t *testing.T, in string, k uint16) {
		v, err := pyjson.Parse([]byte(in))
		if err != nil {
			return
		}
		want := renderRef(v, 0)
		if got := Render(v); got != want {
			t.Fatalf("Render(%q) = %q, want %q", in, got, want)
		}
		got, over := RenderLimit(v, int(k))
		if over != (len(want) > int(k)) || got != want[:min(int(k), len(want))] {
			t.Fatalf("RenderLimit(%q, %d) = %q, %v", in, k, got, over)
		}
	})
}

// BenchmarkRenderBomb renders two render bombs as a server does (ToRecord's budgets): 26 KB (990 levels
// around 10,000 zeros, 20 MB of text: cut at the 8 MiB budget) and 206 KB (100,000 zeros: 200 MB of text).
func BenchmarkRenderBomb(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		body := []byte(`{"state":` + string(nestBomb(990, n)) + `,"questions":{"q":{"type":"noul"}}}`)
		req, err := DecodeRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(commaInt(len(body))+"B", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ToRecord(req, RecordOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRequestTooLong: a request of many questions, each within the row limit, is refused once its packed encoding
// would pass EncodeOptions.MaxInput tokens, before it holds more.
func TestRequestTooLong(t *testing.T) {
	req := manyQuestions(300, "a short state")
	rec, err := ToRecord(req, RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := Encode(newFakeTokenizer(), rec, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limit := full.InputTokens() - 1
	_, err = Encode(newFakeTokenizer(), rec, EncodeOptions{MaxInput: limit})
	var re *RequestTooLongError
	if !errors.As(err, &re) || re.Question != 299 || re.Limit != limit {
		t.Fatalf("Encode with MaxInput %d: %v", limit, err)
	}
	if d, ok := AdmissionDetail(err); !ok || !strings.Contains(d, "split its questions across requests") {
		t.Errorf("detail %q", d)
	}
	if _, err := Encode(newFakeTokenizer(), rec, EncodeOptions{MaxInput: limit + 1}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}

// wordTokenizer is one token a space-separated word, fast enough for states of tens of megabytes.
type wordTokenizer struct{ *fakeTokenizer }

func (w wordTokenizer) Encode(text string) []int {
	ids := make([]int, 0, strings.Count(text, " ")+1)
	for range strings.Fields(text) {
		ids = append(ids, 7)
	}
	return ids
}

// TestLargeStateCounted: a state of plain text past DefaultMaxStateBytes but within stateSpread times its own bytes
// renders whole, and its refusal carries Kev's count of its tokens; past MaxStateSpreadBytes, or a state whose
// nesting multiplies its text past stateSpread times its bytes, is cut at its budget as before.
func TestLargeStateCounted(t *testing.T) {
	words := DefaultMaxStateBytes/5 + 100_000 // "word " a word: past 8 MiB
	cases := []struct {
		name      string
		state     string // JSON
		wantBytes int    // the budget the state is cut at; 0: rendered whole
		wantToks  int    // the count refused with, when not cut
	}{
		{"text past 8 MiB", `"` + strings.Repeat("word ", words) + `"`, 0, words},
		{"a list of lines", `[` + strings.TrimSuffix(strings.Repeat(`"word word word",`, words/3), ",") + `]`, 0, 4 * (words / 3)},
		{"text past 32 MiB", `"` + strings.Repeat("word ", MaxStateSpreadBytes/5+1000) + `"`, MaxStateSpreadBytes, 0},
		{"nested 990 deep", string(nestBomb(990, 100_000)), DefaultMaxStateBytes, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRequest([]byte(`{"state":` + tc.state + `,"questions":{"q":{"type":"noul"}}}`))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := ToRecord(req, RecordOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantBytes > 0 {
				if !rec.StateCut || rec.StateBytes != tc.wantBytes {
					t.Fatalf("state cut %v at %d bytes, want cut at %d", rec.StateCut, rec.StateBytes, tc.wantBytes)
				}
			} else if rec.StateCut || len(rec.State) < DefaultMaxStateBytes {
				t.Fatalf("state cut %v, %d bytes rendered: want it whole, past %d", rec.StateCut, len(rec.State), DefaultMaxStateBytes)
			}
			_, err = Encode(wordTokenizer{newFakeTokenizer()}, rec, EncodeOptions{})
			var se *StateTooLongError
			if !errors.As(err, &se) {
				t.Fatalf("Encode: %v, want a StateTooLongError", err)
			}
			if tc.wantBytes > 0 {
				if se.Bytes != tc.wantBytes || se.Tokens != 0 {
					t.Errorf("refused with %d tokens, %d bytes; want the %d-byte budget", se.Tokens, se.Bytes, tc.wantBytes)
				}
				return
			}
			if se.Bytes != 0 || se.Tokens != tc.wantToks+1 { // <state> included
				t.Errorf("refused with %d tokens, %d bytes; want Kev's count %d", se.Tokens, se.Bytes, tc.wantToks+1)
			}
			if want := "state is " + commaInt(tc.wantToks+1) + " tokens, over the 65,536-token limit"; !strings.HasPrefix(se.Error(), want) {
				t.Errorf("%q, want it to start %q", se.Error(), want)
			}
		})
	}
}
