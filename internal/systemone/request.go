package systemone

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/pyjson"
)

// The question schema names as they appear in validation error locations. The Choice schema's name carries its
// after-validator (the 1..255 options check), as pydantic reports it.
const (
	schemaNoul    = "Noul"
	schemaChoice  = "function-after[_check(), Choice]"
	schemaScore   = "Score"
	schemaRequest = "SystemOneRequest"
)

// FieldError is one validation problem, in pydantic's terms: an error type ("missing", "literal_error",
// "dict_type", "too_short", "value_error", ...), where (Loc: object keys as strings, array indexes and JSON
// character positions as ints), the message, the offending input, and context (null when none).
type FieldError struct {
	Type  string
	Loc   []any // inside the body: ["questions", "q", "Score", "criteria"]; empty for the body itself
	Msg   string
	Input pyjson.Value
	Ctx   pyjson.Value
}

// Path returns Loc as a dotted path: "questions.q.Score.criteria", or "body" for the body itself.
func (e FieldError) Path() string {
	if len(e.Loc) == 0 {
		return "body"
	}
	return joinPath(e.Loc)
}

// Value returns the entry of FastAPI's 422 detail list: {"type", "loc": ["body", ...], "msg", "input"[, "ctx"]}.
func (e FieldError) Value() pyjson.Value {
	loc := []pyjson.Value{pyjson.String("body")}
	for _, p := range e.Loc {
		switch p := p.(type) {
		case string:
			loc = append(loc, pyjson.String(p))
		case int:
			loc = append(loc, pyjson.Int(int64(p)))
		}
	}
	input := e.Input
	if f := input.AsFloat(); input.Kind() == pyjson.KindFloat && (math.IsInf(f, 0) || math.IsNaN(f)) {
		// JSON has no infinities (1e400 parses as one): the input is echoed as Python's repr, in a string, so that
		// the 422 can be sent.
		input = pyjson.String(input.Str())
	}
	ms := []pyjson.Member{
		pyjson.M("type", pyjson.String(e.Type)),
		pyjson.M("loc", pyjson.Array(loc...)),
		pyjson.M("msg", pyjson.String(e.Msg)),
		pyjson.M("input", input),
	}
	if !e.Ctx.IsNull() {
		ms = append(ms, pyjson.M("ctx", e.Ctx))
	}
	return pyjson.Object(ms...)
}

// ValidationError is a request that does not fit the System One schema: every problem found, in the order
// pydantic reports them. A server answers it with status 422 and the body Detail gives.
type ValidationError struct {
	Errors []FieldError
	cause  error // the *pyjson.SyntaxError of a malformed body
}

// Error lists the problems with their paths.
func (e *ValidationError) Error() string {
	var sb strings.Builder
	sb.WriteString("kev: invalid request: ")
	sb.WriteString(strconv.Itoa(len(e.Errors)))
	if len(e.Errors) == 1 {
		sb.WriteString(" validation error")
	} else {
		sb.WriteString(" validation errors")
	}
	for _, fe := range e.Errors {
		sb.WriteString("; ")
		sb.WriteString(fe.Path())
		sb.WriteString(": ")
		sb.WriteString(fe.Msg)
	}
	return sb.String()
}

// Unwrap returns the JSON syntax error of a malformed body, if that is what this is.
func (e *ValidationError) Unwrap() error { return e.cause }

// Detail returns FastAPI's 422 body, {"detail": [...]}.
func (e *ValidationError) Detail() pyjson.Value {
	list := make([]pyjson.Value, len(e.Errors))
	for i, fe := range e.Errors {
		list[i] = fe.Value()
	}
	return pyjson.Object(pyjson.M("detail", pyjson.Array(list...)))
}

// MarshalJSON returns the compact 422 body.
func (e *ValidationError) MarshalJSON() ([]byte, error) { return pyjson.Compact(e.Detail()) }

// DecodeRequest parses and validates a System One request body as Kev's server does (Python json, then pydantic):
//
//   - an empty body, or JSON null, is a missing body;
//   - malformed JSON is a *ValidationError with one json_invalid entry (it unwraps to the *pyjson.SyntaxError);
//     bytes Python cannot read as a str (invalid UTF-8, nesting past pyjson.MaxDepth) are a *pyjson.ParseError,
//     which FastAPI answers with a 400, not a 422;
//   - "state" must be present (null is allowed); "model" must be a string when given (default "kev-latest");
//     "questions" must be a non-empty object of questions, kept in order;
//   - a question is a noul, choice or score by its "type"; keys other than type, instructions and criteria are
//     ignored; a choice needs 1..255 criteria entries and a score 1..255 levels; a noul's criteria, when not null,
//     must be an object, of which only "true" and "false" are read.
//
// Every problem is listed, not just the first.
func DecodeRequest(data []byte) (*Request, error) {
	if len(data) == 0 {
		return nil, &ValidationError{Errors: []FieldError{missing(nil, pyjson.Null())}}
	}
	v, err := pyjson.Parse(data)
	if err != nil {
		var se *pyjson.SyntaxError
		if errors.As(err, &se) {
			return nil, &ValidationError{cause: se, Errors: []FieldError{{
				Type:  "json_invalid",
				Loc:   []any{se.Pos},
				Msg:   "JSON decode error",
				Input: pyjson.Object(),
				Ctx:   pyjson.Object(pyjson.M("error", pyjson.String(se.Msg))),
			}}}
		}
		return nil, err
	}
	return RequestFromValue(v)
}

// RequestFromValue validates a parsed JSON body (see DecodeRequest) and returns the request.
func RequestFromValue(v pyjson.Value) (*Request, error) {
	if v.IsNull() {
		return nil, &ValidationError{Errors: []FieldError{missing(nil, v)}}
	}
	if v.Kind() != pyjson.KindObject {
		return nil, &ValidationError{Errors: []FieldError{modelType(nil, schemaRequest, "SystemOneRequest", v)}}
	}
	var errs []FieldError
	req := &Request{Model: DefaultModel}
	if s, ok := v.Get("state"); ok {
		req.State = s
	} else {
		errs = append(errs, missing([]any{"state"}, v))
	}
	if m, ok := v.Get("model"); ok {
		if m.Kind() == pyjson.KindString {
			req.Model = m.AsString()
		} else {
			errs = append(errs, FieldError{Type: "string_type", Loc: []any{"model"}, Msg: "Input should be a valid string", Input: m})
		}
	}
	qs, ok := v.Get("questions")
	switch {
	case !ok:
		errs = append(errs, missing([]any{"questions"}, v))
	case qs.Kind() != pyjson.KindObject:
		errs = append(errs, FieldError{Type: "dict_type", Loc: []any{"questions"}, Msg: "Input should be a valid dictionary", Input: qs})
	case qs.Len() == 0:
		errs = append(errs, tooShort([]any{"questions"}, "Dictionary", qs))
	default:
		for _, m := range qs.Members() {
			q, qerrs := questionFromValue(m.Key, m.Value)
			errs = append(errs, qerrs...)
			req.Questions = append(req.Questions, QuestionEntry{ID: m.Key, Question: q})
		}
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: errs}
	}
	return req, nil
}

// questionFromValue validates one question the way pydantic's smart union over Noul, Choice and Score does: the
// first schema that accepts it wins; when none does, every schema's errors are reported, in schema order.
func questionFromValue(id string, v pyjson.Value) (Question, []FieldError) {
	base := []any{"questions", id}
	if v.Kind() != pyjson.KindObject {
		return Question{}, []FieldError{
			modelType(base, schemaNoul, "Noul", v),
			modelType(base, schemaChoice, "Choice", v),
			modelType(base, schemaScore, "Score", v),
		}
	}
	typ, hasType := v.Get("type")
	instr, _ := v.Get("instructions")
	crit, hasCrit := v.Get("criteria")
	var all []FieldError
	for _, schema := range []struct {
		name string
		t    QuestionType
	}{{schemaNoul, TypeNoul}, {schemaChoice, TypeChoice}, {schemaScore, TypeScore}} {
		loc := func(field string) []any { return append(append([]any{}, base...), schema.name, field) }
		var errs []FieldError
		switch {
		case !hasType:
			errs = append(errs, missing(loc("type"), v))
		case typ.Kind() != pyjson.KindString || typ.AsString() != string(schema.t):
			want := "'" + string(schema.t) + "'"
			errs = append(errs, FieldError{Type: "literal_error", Loc: loc("type"), Msg: "Input should be " + want,
				Input: typ, Ctx: pyjson.Object(pyjson.M("expected", pyjson.String(want)))})
		}
		q := Question{Type: schema.t, Instructions: instr}
		switch schema.t {
		case TypeNoul:
			switch {
			case !hasCrit || crit.IsNull():
			case crit.Kind() != pyjson.KindObject:
				errs = append(errs, dictType(loc("criteria"), crit))
			default:
				q.True, _ = crit.Get("true")
				q.False, _ = crit.Get("false")
			}
		case TypeChoice:
			switch {
			case !hasCrit:
				errs = append(errs, missing(loc("criteria"), v))
			case crit.Kind() != pyjson.KindObject:
				errs = append(errs, dictType(loc("criteria"), crit))
			default:
				for _, m := range crit.Members() {
					q.Options = append(q.Options, Option{Name: m.Key, Description: m.Value})
				}
			}
			if len(errs) == 0 && (len(q.Options) < 1 || len(q.Options) > MaxOptions) {
				errs = append(errs, choiceRange(append(append([]any{}, base...), schema.name), v))
			}
		case TypeScore:
			switch {
			case !hasCrit:
				errs = append(errs, missing(loc("criteria"), v))
			case crit.Kind() != pyjson.KindArray:
				errs = append(errs, FieldError{Type: "list_type", Loc: loc("criteria"), Msg: "Input should be a valid list", Input: crit})
			case crit.Len() < 1:
				errs = append(errs, tooShort(loc("criteria"), "List", crit))
			case crit.Len() > MaxOptions:
				errs = append(errs, tooLong(loc("criteria"), "List", crit))
			default:
				q.Levels = crit.Elems()
			}
		}
		if len(errs) == 0 {
			return q, nil
		}
		all = append(all, errs...)
	}
	return Question{}, all
}

// Validate checks a request built in Go against the same rules DecodeRequest applies, plus what JSON cannot
// express: question ids and a choice's option names must be unique, and types must be known.
func (r *Request) Validate() error {
	var errs []FieldError
	if len(r.Questions) == 0 {
		errs = append(errs, tooShort([]any{"questions"}, "Dictionary", pyjson.Object()))
	}
	seen := make(map[string]bool, len(r.Questions))
	for _, e := range r.Questions {
		base := []any{"questions", e.ID}
		if seen[e.ID] {
			errs = append(errs, FieldError{Type: "value_error", Loc: base, Msg: fmt.Sprintf("Value error, question id %q is repeated", e.ID), Input: pyjson.String(e.ID)})
		}
		seen[e.ID] = true
		q := e.Question
		at := func(schema string, field ...any) []any {
			return append(append(append([]any{}, base...), schema), field...)
		}
		switch q.Type {
		case TypeNoul:
		case TypeChoice:
			if len(q.Options) < 1 || len(q.Options) > MaxOptions {
				errs = append(errs, choiceRange(at(schemaChoice), q.Value()))
			}
			names := make(map[string]bool, len(q.Options))
			for _, o := range q.Options {
				if names[o.Name] {
					errs = append(errs, FieldError{Type: "value_error", Loc: at(schemaChoice, "criteria"),
						Msg: fmt.Sprintf("Value error, option %q is repeated", o.Name), Input: pyjson.String(o.Name)})
				}
				names[o.Name] = true
			}
		case TypeScore:
			levels := pyjson.Array(q.Levels...)
			switch {
			case len(q.Levels) < 1:
				errs = append(errs, tooShort(at(schemaScore, "criteria"), "List", levels))
			case len(q.Levels) > MaxOptions:
				errs = append(errs, tooLong(at(schemaScore, "criteria"), "List", levels))
			}
		default:
			errs = append(errs, FieldError{Type: "literal_error", Loc: append(base, "type"),
				Msg: "Input should be 'noul', 'choice' or 'score'", Input: pyjson.String(string(q.Type))})
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Errors: errs}
	}
	return nil
}

func missing(loc []any, input pyjson.Value) FieldError {
	return FieldError{Type: "missing", Loc: loc, Msg: "Field required", Input: input}
}

func dictType(loc []any, input pyjson.Value) FieldError {
	return FieldError{Type: "dict_type", Loc: loc, Msg: "Input should be a valid dictionary", Input: input}
}

func modelType(base []any, schema, class string, input pyjson.Value) FieldError {
	loc := append(append([]any{}, base...), schema)
	if schema == schemaRequest {
		loc = base
	}
	return FieldError{Type: "model_type", Loc: loc, Msg: "Input should be a valid dictionary or instance of " + class,
		Input: input, Ctx: pyjson.Object(pyjson.M("class_name", pyjson.String(class)))}
}

func choiceRange(loc []any, input pyjson.Value) FieldError {
	return FieldError{Type: "value_error", Loc: loc, Msg: "Value error, criteria must have 1..255 options", Input: input,
		Ctx: pyjson.Object(pyjson.M("error", pyjson.Object()))}
}

func tooShort(loc []any, fieldType string, input pyjson.Value) FieldError {
	return FieldError{Type: "too_short", Loc: loc,
		Msg:   fmt.Sprintf("%s should have at least 1 item after validation, not %d", fieldType, input.Len()),
		Input: input,
		Ctx: pyjson.Object(pyjson.M("field_type", pyjson.String(fieldType)), pyjson.M("min_length", pyjson.Int(1)),
			pyjson.M("actual_length", pyjson.Int(int64(input.Len()))))}
}

func tooLong(loc []any, fieldType string, input pyjson.Value) FieldError {
	return FieldError{Type: "too_long", Loc: loc,
		Msg:   fmt.Sprintf("%s should have at most %d items after validation, not %d", fieldType, MaxOptions, input.Len()),
		Input: input,
		Ctx: pyjson.Object(pyjson.M("field_type", pyjson.String(fieldType)), pyjson.M("max_length", pyjson.Int(MaxOptions)),
			pyjson.M("actual_length", pyjson.Int(int64(input.Len()))))}
}
