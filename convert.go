package kev

import (
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// The public types mirror the protocol's; these copy between them.

func toSysRequest(r *Request) *systemone.Request {
	if r == nil {
		return nil
	}
	out := &systemone.Request{Model: r.Model, State: r.State.v, Questions: make([]systemone.QuestionEntry, len(r.Questions))}
	for i, e := range r.Questions {
		q := e.Question
		sq := systemone.Question{Type: systemone.QuestionType(q.Type), Instructions: q.Instructions.v, True: q.True.v, False: q.False.v}
		if q.Options != nil {
			sq.Options = make([]systemone.Option, len(q.Options))
			for j, o := range q.Options {
				sq.Options[j] = systemone.Option{Name: o.Name, Description: o.Description.v}
			}
		}
		if q.Levels != nil {
			sq.Levels = make([]pyjson.Value, len(q.Levels))
			for j, l := range q.Levels {
				sq.Levels[j] = l.v
			}
		}
		out.Questions[i] = systemone.QuestionEntry{ID: e.ID, Question: sq}
	}
	return out
}

func fromSysRequest(r *systemone.Request) *Request {
	out := &Request{Model: r.Model, State: Value{r.State}, Questions: make([]QuestionEntry, len(r.Questions))}
	for i, e := range r.Questions {
		sq := e.Question
		q := Question{Type: QuestionType(sq.Type), Instructions: Value{sq.Instructions}, True: Value{sq.True}, False: Value{sq.False}}
		if sq.Options != nil {
			q.Options = make([]Option, len(sq.Options))
			for j, o := range sq.Options {
				q.Options[j] = Option{Name: o.Name, Description: Value{o.Description}}
			}
		}
		if sq.Levels != nil {
			q.Levels = make([]Value, len(sq.Levels))
			for j, l := range sq.Levels {
				q.Levels[j] = Value{l}
			}
		}
		out.Questions[i] = QuestionEntry{ID: e.ID, Question: q}
	}
	return out
}

func toSysAnswer(a Answer) systemone.Answer {
	out := systemone.Answer{Type: systemone.QuestionType(a.Type), Noul: a.Noul, Choice: a.Choice, Score: a.Score, Confidence: a.Confidence}
	if a.Legend != nil {
		out.Legend = make([]systemone.LegendEntry, len(a.Legend))
		for i, l := range a.Legend {
			out.Legend[i] = systemone.LegendEntry{Key: l.Key, Text: l.Text}
		}
	}
	if a.Probabilities != nil {
		out.Probabilities = make([]systemone.Prob, len(a.Probabilities))
		for i, p := range a.Probabilities {
			out.Probabilities[i] = systemone.Prob{Key: p.Key, P: p.P}
		}
	}
	return out
}

func fromSysAnswer(a systemone.Answer) Answer {
	out := Answer{Type: QuestionType(a.Type), Noul: a.Noul, Choice: a.Choice, Score: a.Score, Confidence: a.Confidence}
	if a.Legend != nil {
		out.Legend = make([]LegendEntry, len(a.Legend))
		for i, l := range a.Legend {
			out.Legend[i] = LegendEntry{Key: l.Key, Text: l.Text}
		}
	}
	if a.Probabilities != nil {
		out.Probabilities = make([]Prob, len(a.Probabilities))
		for i, p := range a.Probabilities {
			out.Probabilities[i] = Prob{Key: p.Key, P: p.P}
		}
	}
	return out
}

func fromSysAnswers(as []systemone.AnswerEntry) []AnswerEntry {
	out := make([]AnswerEntry, len(as))
	for i, a := range as {
		out[i] = AnswerEntry{ID: a.ID, Answer: fromSysAnswer(a.Answer)}
	}
	return out
}

func toSysResponse(r *Response) *systemone.Response {
	out := &systemone.Response{Model: r.Model, LatencyMS: r.LatencyMS, Truncated: r.Truncated,
		Usage: systemone.Usage(r.Usage), Answers: make([]systemone.AnswerEntry, len(r.Answers))}
	for i, a := range r.Answers {
		out.Answers[i] = systemone.AnswerEntry{ID: a.ID, Answer: toSysAnswer(a.Answer)}
	}
	return out
}

func fromSysResponse(r *systemone.Response) *Response {
	return &Response{Model: r.Model, LatencyMS: r.LatencyMS, Truncated: r.Truncated, Usage: Usage(r.Usage),
		Answers: fromSysAnswers(r.Answers)}
}
