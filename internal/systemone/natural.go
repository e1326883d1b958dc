package systemone

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/pyjson"
)

// Problem is one validation problem in Go's terms: where (a dotted path of JSON keys, array indexes in brackets,
// "" for the request itself) and what is wrong, without pydantic's schema names.
type Problem struct {
	Field string
	Msg   string
}

// Problems restates a validation error's pydantic entries as Go error text. A question that matches none of the
// three schemas is one problem (its type, or its not being an object) instead of one per schema; a question whose
// type is known keeps only that schema's problems. Messages lose pydantic's "Value error, " prefix and start in
// lower case.
func (e *ValidationError) Problems() []Problem {
	var out []Problem
	seen := map[Problem]bool{}
	add := func(p Problem) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	// The schema branches that failed on "type", per question path: a question with a known type keeps only the
	// branch that did not.
	typeFailed := map[string]map[string]bool{}
	for _, fe := range e.Errors {
		q, schema, rest := splitSchema(fe.Loc)
		if schema != "" && len(rest) == 1 && rest[0] == "type" {
			if typeFailed[q] == nil {
				typeFailed[q] = map[string]bool{}
			}
			typeFailed[q][schema] = true
		}
	}
	for _, fe := range e.Errors {
		q, schema, rest := splitSchema(fe.Loc)
		if fe.Type == "json_invalid" {
			add(Problem{Msg: naturalMsg(fe)}) // its location is a character position, which the message gives
			continue
		}
		if schema == "" || schema == schemaRequest {
			add(Problem{Field: naturalPath(fe.Loc), Msg: naturalMsg(fe)})
			continue
		}
		failed := typeFailed[q]
		switch {
		case fe.Type == "model_type":
			add(Problem{Field: q, Msg: "must be an object with a type: \"noul\", \"choice\" or \"score\""})
		case len(failed) == 3:
			// No schema took the type: one problem for it, and nothing about the schemas' other fields.
			if len(rest) != 1 || rest[0] != "type" {
				continue
			}
			msg := "must be \"noul\", \"choice\" or \"score\""
			if fe.Type == "missing" {
				msg = "missing; want \"noul\", \"choice\" or \"score\""
			}
			add(Problem{Field: joinNatural(q, "type"), Msg: msg})
		case failed[schema]:
			// Another schema matched the type; this one's problems do not apply.
		default:
			add(Problem{Field: joinNatural(q, rest...), Msg: naturalMsg(fe)})
		}
	}
	return out
}

// splitSchema splits a location at its schema name: the path before it, the schema, and the keys after it.
func splitSchema(loc []any) (before, schema string, rest []string) {
	for i, p := range loc {
		if s, ok := p.(string); ok && i > 0 && (s == schemaNoul || s == schemaChoice || s == schemaScore) {
			for _, r := range loc[i+1:] {
				rest = append(rest, pathElem(r))
			}
			return naturalPath(loc[:i]), s, rest
		}
	}
	return naturalPath(loc), "", nil
}

func pathElem(p any) string {
	switch p := p.(type) {
	case string:
		return p
	case int:
		return "[" + strconv.Itoa(p) + "]"
	}
	return ""
}

// naturalPath writes a location as "questions.q.criteria", array indexes as "[0]".
func naturalPath(loc []any) string {
	var sb strings.Builder
	for _, p := range loc {
		if s, ok := p.(string); ok {
			if s == schemaRequest {
				continue
			}
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(s)
		} else {
			sb.WriteString(pathElem(p))
		}
	}
	return sb.String()
}

func joinNatural(base string, rest ...string) string {
	for _, r := range rest {
		switch {
		case strings.HasPrefix(r, "["), base == "":
			base += r
		default:
			base += "." + r
		}
	}
	return base
}

// naturalMsg is an entry's message for Go: a malformed body names the position and the decoder's message.
func naturalMsg(fe FieldError) string {
	if fe.Type == "json_invalid" {
		msg := "malformed JSON"
		if len(fe.Loc) == 1 {
			if pos, ok := fe.Loc[0].(int); ok {
				msg += " at character " + strconv.Itoa(pos)
			}
		}
		if c, ok := fe.Ctx.Get("error"); ok && c.Kind() == pyjson.KindString {
			msg += ": " + c.AsString()
		}
		return msg
	}
	msg := strings.TrimPrefix(fe.Msg, "Value error, ")
	if r, n := utf8.DecodeRuneInString(msg); n > 0 && unicode.IsUpper(r) {
		if r2, _ := utf8.DecodeRuneInString(msg[n:]); !unicode.IsUpper(r2) {
			msg = string(unicode.ToLower(r)) + msg[n:]
		}
	}
	return msg
}
