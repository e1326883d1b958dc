package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"

	"github.com/kevgo/kev"
)

// writer writes one output record per input record.
type writer struct {
	w         io.Writer
	csv       *csv.Writer // nil for JSONL
	questions []kev.QuestionEntry
	header    bool
}

func newWriter(w io.Writer, format string, questions []kev.QuestionEntry) *writer {
	wr := &writer{w: w, questions: questions}
	if format == "csv" {
		wr.csv = csv.NewWriter(w)
	}
	return wr
}

// write writes a record's answers, or its error.
//
// JSONL: {"row": n, "id": id, "answers": {question id: answer as Kev's API writes it}} or {"row": n, "id": id,
// "error": text}. CSV: row, id, then per question its value (noul: P(yes); choice: the option, and <id>_p its
// probability; score: the expected level, and <id>_confidence), then error.
func (wr *writer) write(r row, answers []kev.AnswerEntry, err error) error {
	if wr.csv != nil {
		return wr.writeCSV(r, answers, err)
	}
	var b bytes.Buffer
	b.WriteString(`{"row":`)
	b.WriteString(strconv.Itoa(r.n))
	if r.id != nil {
		b.WriteString(`,"id":`)
		b.Write(r.id)
	}
	if err != nil {
		msg, _ := json.Marshal(err.Error())
		b.WriteString(`,"error":`)
		b.Write(msg)
	} else {
		b.WriteString(`,"answers":{`)
		for i, a := range answers {
			if i > 0 {
				b.WriteByte(',')
			}
			id, _ := json.Marshal(a.ID)
			b.Write(id)
			b.WriteByte(':')
			aj, merr := a.Answer.MarshalJSON()
			if merr != nil {
				return merr
			}
			b.Write(aj)
		}
		b.WriteByte('}')
	}
	b.WriteString("}\n")
	_, werr := wr.w.Write(b.Bytes())
	return werr
}

// writeHeader writes the CSV header once.
func (wr *writer) writeHeader() error {
	if wr.header {
		return nil
	}
	wr.header = true
	h := []string{"row", "id"}
	for _, q := range wr.questions {
		h = append(h, q.ID)
		switch q.Question.Type {
		case kev.TypeChoice:
			h = append(h, q.ID+"_p")
		case kev.TypeScore:
			h = append(h, q.ID+"_confidence")
		}
	}
	return wr.csv.Write(append(h, "error"))
}

func (wr *writer) writeCSV(r row, answers []kev.AnswerEntry, err error) error {
	if err := wr.writeHeader(); err != nil {
		return err
	}
	rec := []string{strconv.Itoa(r.n), ""}
	if r.id != nil {
		var s string
		if json.Unmarshal(r.id, &s) == nil {
			rec[1] = s
		} else {
			rec[1] = string(r.id)
		}
	}
	byID := map[string]kev.Answer{}
	for _, a := range answers {
		byID[a.ID] = a.Answer
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	for _, q := range wr.questions {
		a, ok := byID[q.ID]
		switch q.Question.Type {
		case kev.TypeNoul:
			rec = append(rec, cell(ok, f(a.Noul)))
		case kev.TypeChoice:
			p := 0.0
			for _, pr := range a.Probabilities {
				if pr.Key == a.Choice {
					p = pr.P
				}
			}
			rec = append(rec, cell(ok, a.Choice), cell(ok, f(p)))
		case kev.TypeScore:
			rec = append(rec, cell(ok, f(a.Score)), cell(ok, f(a.Confidence)))
		}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return wr.csv.Write(append(rec, msg))
}

// cell is s when the answer is there, else empty.
func cell(ok bool, s string) string {
	if !ok {
		return ""
	}
	return s
}

// flush writes out what the CSV writer holds.
func (wr *writer) flush() error {
	if wr.csv == nil {
		return nil
	}
	if err := wr.writeHeader(); err != nil {
		return err
	}
	wr.csv.Flush()
	return wr.csv.Error()
}
