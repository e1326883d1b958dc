package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReadJSONL(t *testing.T) {
	in := "{\"id\": \"a\", \"text\": \"hi\"}\n\n  {\"text\": {\"k\": [1, 2.0]}, \"id\": 7}  \n{\"text\": 3}\n[]\n{\"text\": \"\"}\n"
	rows, err := readJSONL(strings.NewReader(in), "text", "id")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		n     int
		id    string
		state string
		err   string
	}{
		{1, `"a"`, "hi", ""},
		{3, `7`, `{"k": [1, 2.0]}`, ""}, // structured state: the JSON as written
		{4, ``, `3`, ""},
		{5, ``, "", "row 5: not a JSON object"},
		{6, ``, "", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	for i, w := range want {
		r := rows[i]
		var state string
		switch s := r.state.(type) {
		case string:
			state = s
		case json.RawMessage:
			state = string(s)
		}
		errText := ""
		if r.err != nil {
			errText = r.err.Error()
		}
		if r.n != w.n || string(r.id) != w.id || state != w.state || !strings.HasPrefix(errText, w.err) || (w.err == "") != (r.err == nil) {
			t.Errorf("row %d: %+v (state %q, err %q), want %+v", i, r, state, errText, w)
		}
	}
}

func TestReadCSV(t *testing.T) {
	rows, err := readCSV(strings.NewReader("\ufeffid, text\nx,\"a, \"\"b\"\"\nc\"\ny\nz,   \n"), "text", "id")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].state != "a, \"b\"\nc" || string(rows[0].id) != `"x"` ||
		rows[1].err == nil || rows[2].err == nil || rows[2].n != 3 {
		t.Errorf("%+v", rows)
	}
	for _, bad := range []string{"", "id,body\nx,y\n"} {
		if _, err := readCSV(strings.NewReader(bad), "text", "id"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzReadRows checks that neither reader panics, and that every record read has a state or an error, in order.
func FuzzReadRows(f *testing.F) {
	f.Add([]byte("{\"id\": 1, \"text\": \"x\"}\n"), false)
	f.Add([]byte("{\"text\": {\"a\": [1, null]}}\n\nnull\n[1]\n{\"text\": null}"), false)
	f.Add([]byte("id,text\n1,\"a\nb\"\n2,\n"), true)
	f.Add([]byte("text\n\"unterminated\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, isCSV bool) {
		read := readJSONL
		if isCSV {
			read = readCSV
		}
		rows, err := read(bytes.NewReader(data), "text", "id")
		if err != nil {
			return
		}
		last := 0
		for _, r := range rows {
			if r.n <= last {
				t.Fatalf("record numbers not increasing: %d after %d", r.n, last)
			}
			last = r.n
			if (r.state == nil) == (r.err == nil) {
				t.Fatalf("record %d: state %v and error %v", r.n, r.state, r.err)
			}
			if raw, ok := r.state.(json.RawMessage); ok && !json.Valid(raw) {
				t.Fatalf("record %d: invalid JSON state %q", r.n, raw)
			}
		}
	})
}
