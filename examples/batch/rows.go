package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// row is one input record: its number (a JSONL line number, or a CSV record number counting from 1 after the
// header), an id to carry to the output, and the state to ask about, or why there is none.
type row struct {
	n     int
	id    json.RawMessage // JSON of the input's id field, or nil
	state any             // a string, or json.RawMessage of structured content
	err   error
}

// rowError is a record the tool could not read a state from.
type rowError struct {
	Row int
	Msg string
}

func (e *rowError) Error() string { return fmt.Sprintf("row %d: %s", e.Row, e.Msg) }

// readJSONL reads one JSON value a line (blank lines skipped). With field set, each line must be an object and
// field is its state (text, or structured content kept exactly as written); with field "", the whole line is the
// state. idField, when present in an object, is carried to the output.
func readJSONL(r io.Reader, field, idField string) ([]row, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var rows []row
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rw := row{n: line}
		if !json.Valid(b) {
			rw.err = &rowError{line, "not valid JSON"}
			rows = append(rows, rw)
			continue
		}
		if field == "" {
			rw.state = json.RawMessage(bytes.Clone(b))
			rows = append(rows, rw)
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			rw.err = &rowError{line, "not a JSON object (use -state '' to ask about whole lines)"}
			rows = append(rows, rw)
			continue
		}
		if id, ok := obj[idField]; ok && idField != "" {
			rw.id = id
		}
		v, ok := obj[field]
		switch {
		case !ok:
			rw.err = &rowError{line, fmt.Sprintf("no %q field", field)}
		case bytes.Equal(v, []byte("null")):
			rw.err = &rowError{line, fmt.Sprintf("%q is null", field)}
		case v[0] == '"':
			var s string
			json.Unmarshal(v, &s)
			rw.state = s
		default:
			rw.state = v
		}
		rows = append(rows, rw)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}

// readCSV reads a CSV file with a header row; column field is the state (text) and column idField, when there,
// is carried to the output.
func readCSV(r io.Reader, field, idField string) ([]row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the CSV file is empty (it needs a header row)")
		}
		return nil, err
	}
	col, idCol := -1, -1
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		switch h {
		case field:
			col = i
		case idField:
			idCol = i
		}
	}
	if col < 0 {
		return nil, fmt.Errorf("the CSV header %q has no %q column (choose one with -state)", header, field)
	}
	var rows []row
	for n := 1; ; n++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, err
		}
		rw := row{n: n}
		if idCol >= 0 && idCol < len(rec) {
			rw.id, _ = json.Marshal(rec[idCol])
		}
		if col >= len(rec) || strings.TrimSpace(rec[col]) == "" {
			rw.err = &rowError{n, fmt.Sprintf("the %q column is empty", field)}
		} else {
			rw.state = rec[col]
		}
		rows = append(rows, rw)
	}
}
