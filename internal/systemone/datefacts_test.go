package systemone

import (
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

func TestDateFactsSpecVectors(t *testing.T) {
	got := DateFacts("Due July 4, 2026. Received June 26, 2026. Shipped 2026-07-01.")
	want := "June 26, 2026 is 8 days before July 4, 2026. 2026-07-01 is 3 days before July 4, 2026. 2026-07-01 is 5 days after June 26, 2026."
	if got != want {
		t.Fatalf("got %q", got)
	}
	one := parse(t, `{"case": "one date: May 1, 2026"}`)
	if got := WithDateFacts(one); !pyjson.Equal(got, one) {
		t.Fatalf("one date changed the state: %s", pyjson.Dumps(got))
	}
}

// TestDateFactsMatchPython checks DateFacts against CPython's regular expression and strptime on tricky and
// random texts: word boundaries, impossible dates, leap years, repeats, far-apart years.
func TestDateFactsMatchPython(t *testing.T) {
	s := loadSemantics(t)
	if len(s.DateFacts) < 50 {
		t.Fatalf("%d cases", len(s.DateFacts))
	}
	for _, c := range s.DateFacts {
		if got := DateFacts(c[0]); got != c[1] {
			t.Errorf("DateFacts(%q)\n got %q\nwant %q", c[0], got, c[1])
		}
	}
}

func TestWithDateFacts(t *testing.T) {
	facts := "June 26, 2026 is 8 days before July 4, 2026."
	for _, tc := range []struct{ in, want string }{
		{`{"a": "July 4, 2026", "b": "June 26, 2026"}`, `{"a": "July 4, 2026", "b": "June 26, 2026", "date_facts": "` + facts + `"}`},
		{`{"date_facts": "old", "a": "July 4, 2026 June 26, 2026"}`, `{"date_facts": "` + facts + `", "a": "July 4, 2026 June 26, 2026"}`},
		{`["July 4, 2026", "June 26, 2026"]`, `["July 4, 2026", "June 26, 2026", {"date_facts": "` + facts + `"}]`},
		{`"July 4, 2026 June 26, 2026"`, `"July 4, 2026 June 26, 2026\n\ndate_facts: ` + facts + `"`},
		{`"no dates"`, `"no dates"`},
		{`null`, `null`},
	} {
		if got := pyjson.Dumps(WithDateFacts(parse(t, tc.in))); got != tc.want {
			t.Errorf("WithDateFacts(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	req := NewRequest("Due July 4, 2026. Received June 26, 2026.", Noul("n", ""))
	rec, err := ToRecord(req, RecordOptions{DateFacts: true})
	if err != nil || rec.State != "Due July 4, 2026. Received June 26, 2026.\n\ndate_facts: "+facts {
		t.Fatalf("record state %q, %v", rec.State, err)
	}
}
