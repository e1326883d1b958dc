package systemone

import (
	"context"
	"math"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/kevgo/kev/internal/mt19937"
	"github.com/kevgo/kev/internal/pyjson"
)

// Permute bounds and defaults (Kev's /v1/systemone/permute).
const (
	DefaultPermutations = 6
	MinPermutations     = 1
	MaxPermutations     = 64
)

// PermuteRequest asks one choice question of a request under NPerm option orders: run 0 keeps the request's
// order, and every later run shuffles a fresh copy of it with Python's random.Random(Seed).shuffle, the stream
// continuing from run to run.
type PermuteRequest struct {
	Request  *Request
	Question string   // the id of a choice question in Request
	NPerm    int      // 1..64
	Seed     *big.Int // any integer; the sign is dropped, as Python's seeding does
}

// PermuteRun is one run of a permutation: the option order it used and its answer.
type PermuteRun struct {
	Order         []string
	Probabilities []Prob // rounded, in Order
	Choice        string
	LatencyMS     float64
}

// PermuteResponse is the answer of /v1/systemone/permute.
type PermuteResponse struct {
	Runs         []PermuteRun
	ArgmaxStable bool   // every run chose the same option
	Spread       []Prob // per option, in the request's order: max minus min of its rounded probability over runs

	// Truncate mode only: the last run's truncated flag and state token counts.
	Truncated                    *bool
	StateTokens, StateTokensUsed int
}

// Value returns the response as Kev's JSON object: {"runs", "argmax_stable", "spread"[, "truncated", "usage"]}.
// Spread values are not re-rounded, so a value such as 0.010000000000000009 can appear.
func (p *PermuteResponse) Value() pyjson.Value {
	runs := make([]pyjson.Value, len(p.Runs))
	for i, r := range p.Runs {
		order := make([]pyjson.Value, len(r.Order))
		for j, k := range r.Order {
			order[j] = pyjson.String(k)
		}
		runs[i] = pyjson.Object(
			pyjson.M("order", pyjson.Array(order...)),
			pyjson.M("probabilities", probsValue(r.Probabilities)),
			pyjson.M("choice", pyjson.String(r.Choice)),
			pyjson.M("latency_ms", pyjson.Float(r.LatencyMS)),
		)
	}
	ms := []pyjson.Member{
		pyjson.M("runs", pyjson.Array(runs...)),
		pyjson.M("argmax_stable", pyjson.Bool(p.ArgmaxStable)),
		pyjson.M("spread", probsValue(p.Spread)),
	}
	if p.Truncated != nil {
		ms = append(ms, pyjson.M("truncated", pyjson.Bool(*p.Truncated)),
			pyjson.M("usage", pyjson.Object(pyjson.M("state_tokens", intv(p.StateTokens)),
				pyjson.M("state_tokens_used", intv(p.StateTokensUsed)))))
	}
	return pyjson.Object(ms...)
}

// PermuteOrders returns the n option orders of a permute request over keys: run 0 is keys as given, and run i > 0
// is a fresh copy of keys shuffled by Python's random.Random(seed), one stream across all runs.
func PermuteOrders(keys []string, n int, seed *big.Int) [][]string {
	if seed == nil {
		seed = new(big.Int)
	}
	rng := mt19937.NewBig(seed)
	orders := make([][]string, n)
	for i := range orders {
		o := slices.Clone(keys)
		if i > 0 {
			rng.Shuffle(len(o), func(a, b int) { o[a], o[b] = o[b], o[a] })
		}
		orders[i] = o
	}
	return orders
}

// errNotChoice is permute's 422 for a question id that is missing or not a choice.
var errNotChoice = &DetailError{Status: http.StatusUnprocessableEntity, Msg: "question must be an existing choice question"}

// Permute answers a permute request with do (a Predictor's Do, say): every run is a request holding only the
// question, its options re-keyed in that run's order (descriptions kept), on the same state and model. The runs
// render and encode the state once and are sent in order, PartsInFlight at a time, each admitted by its own
// tokens. A question id that is missing or not a choice is an error whose 422 detail is "question must be an
// existing choice question".
func Permute(ctx context.Context, do func(context.Context, *Request) (*Response, error), pr *PermuteRequest) (*PermuteResponse, error) {
	if err := checkIDs(pr.Request); err != nil {
		return nil, err
	}
	var q *QuestionEntry
	for i := range pr.Request.Questions {
		if pr.Request.Questions[i].ID == pr.Question {
			q = &pr.Request.Questions[i] // a Go-built request may repeat an id: the last one wins, as in a dict
		}
	}
	if q == nil || q.Question.Type != TypeChoice {
		return nil, errNotChoice
	}
	byName := make(map[string]Option, len(q.Question.Options))
	keys := make([]string, len(q.Question.Options))
	for i, o := range q.Question.Options {
		keys[i] = o.Name
		byName[o.Name] = o
	}
	orders := PermuteOrders(keys, pr.NPerm, pr.Seed)
	reqs := make([]*Request, len(orders))
	shared := &sharedState{}
	for i, order := range orders {
		e := *q
		e.Question.Options = make([]Option, len(order))
		for j, k := range order {
			e.Question.Options[j] = byName[k]
		}
		reqs[i] = single(pr.Request, e, shared)
	}
	resps, err := doAll(ctx, do, reqs)
	if err != nil {
		return nil, err
	}
	out := &PermuteResponse{ArgmaxStable: true}
	lo := make(map[string]float64, len(keys))
	hi := make(map[string]float64, len(keys))
	for i, resp := range resps {
		if len(resp.Answers) != 1 {
			return nil, &DetailError{Status: http.StatusInternalServerError, Msg: "permute run gave no single answer"}
		}
		a := resp.Answers[0].Answer
		run := PermuteRun{Order: orders[i], Probabilities: a.Probabilities, Choice: a.Choice, LatencyMS: resp.LatencyMS}
		out.Runs = append(out.Runs, run)
		if a.Choice != out.Runs[0].Choice {
			out.ArgmaxStable = false
		}
		for _, p := range a.Probabilities {
			if i == 0 {
				lo[p.Key], hi[p.Key] = p.P, p.P
				continue
			}
			lo[p.Key] = math.Min(lo[p.Key], p.P)
			hi[p.Key] = math.Max(hi[p.Key], p.P)
		}
	}
	for _, k := range keys {
		out.Spread = append(out.Spread, Prob{Key: k, P: hi[k] - lo[k]})
	}
	if last := resps[len(resps)-1]; last.Truncated != nil {
		t := *last.Truncated
		out.Truncated = &t
		out.StateTokens, out.StateTokensUsed = last.Usage.StateTokens, last.Usage.StateTokensUsed
	}
	return out, nil
}

// PermuteRequestFromValue validates a parsed permute body as FastAPI and pydantic do: "request" is a System One
// request (its errors located under "request"), "question" a string, "n_perm" an integer in 1..64 (default 6) and
// "seed" an integer (default 0). Integers follow pydantic's lax mode: a bool, a float without a fraction, or a
// decimal string ("6", " 7 ", "1_0", "6.00") is accepted. Every problem is reported in a *ValidationError.
func PermuteRequestFromValue(v pyjson.Value) (*PermuteRequest, error) {
	if v.IsNull() {
		return nil, &ValidationError{Errors: []FieldError{{Type: "missing", Msg: "Field required", Input: v}}}
	}
	if v.Kind() != pyjson.KindObject {
		return nil, &ValidationError{Errors: []FieldError{{Type: "model_type",
			Msg:   "Input should be a valid dictionary or instance of PermuteRequest",
			Input: v, Ctx: pyjson.Object(pyjson.M("class_name", pyjson.String("PermuteRequest")))}}}
	}
	pr := &PermuteRequest{NPerm: DefaultPermutations, Seed: new(big.Int)}
	var errs []FieldError
	if rv, ok := v.Get("request"); !ok {
		errs = append(errs, FieldError{Type: "missing", Loc: []any{"request"}, Msg: "Field required", Input: v})
	} else if req, err := RequestFromValue(rv); err != nil {
		ve, ok := err.(*ValidationError)
		if !ok {
			return nil, err
		}
		for _, fe := range ve.Errors {
			fe.Loc = append([]any{"request"}, fe.Loc...)
			errs = append(errs, fe)
		}
	} else {
		pr.Request = req
	}
	if qv, ok := v.Get("question"); !ok {
		errs = append(errs, FieldError{Type: "missing", Loc: []any{"question"}, Msg: "Field required", Input: v})
	} else if qv.Kind() != pyjson.KindString {
		errs = append(errs, FieldError{Type: "string_type", Loc: []any{"question"}, Msg: "Input should be a valid string", Input: qv})
	} else {
		pr.Question = qv.AsString()
	}
	if nv, ok := v.Get("n_perm"); ok {
		n, fe := laxInt(nv, "n_perm")
		switch {
		case fe != nil:
			errs = append(errs, *fe)
		case n.Cmp(big.NewInt(MinPermutations)) < 0:
			errs = append(errs, FieldError{Type: "greater_than_equal", Loc: []any{"n_perm"},
				Msg: "Input should be greater than or equal to 1", Input: nv, Ctx: pyjson.Object(pyjson.M("ge", pyjson.Int(MinPermutations)))})
		case n.Cmp(big.NewInt(MaxPermutations)) > 0:
			errs = append(errs, FieldError{Type: "less_than_equal", Loc: []any{"n_perm"},
				Msg: "Input should be less than or equal to 64", Input: nv, Ctx: pyjson.Object(pyjson.M("le", pyjson.Int(MaxPermutations)))})
		default:
			pr.NPerm = int(n.Int64())
		}
	}
	if sv, ok := v.Get("seed"); ok {
		n, fe := laxInt(sv, "seed")
		if fe != nil {
			errs = append(errs, *fe)
		} else {
			pr.Seed = n
		}
	}
	if len(errs) > 0 {
		return nil, &ValidationError{Errors: errs}
	}
	return pr, nil
}

// laxDecimal is pydantic's lax integer string, after trimming: a sign, digits with single underscores between
// them, and optionally a fraction of zeros.
var laxDecimal = regexp.MustCompile(`^[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?$`)

// laxInt reads an integer field as pydantic's lax mode does.
func laxInt(v pyjson.Value, field string) (*big.Int, *FieldError) {
	loc := []any{field}
	intType := &FieldError{Type: "int_type", Loc: loc, Msg: "Input should be a valid integer", Input: v}
	switch v.Kind() {
	case pyjson.KindInt:
		n, ok := new(big.Int).SetString(v.IntText(), 10)
		if !ok {
			return nil, intType
		}
		return n, nil
	case pyjson.KindBool:
		if v.AsBool() {
			return big.NewInt(1), nil
		}
		return new(big.Int), nil
	case pyjson.KindFloat:
		f := v.AsFloat()
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return nil, &FieldError{Type: "finite_number", Loc: loc, Msg: "Input should be a finite number", Input: v}
		case f != math.Trunc(f):
			return nil, &FieldError{Type: "int_from_float", Loc: loc,
				Msg: "Input should be a valid integer, got a number with a fractional part", Input: v}
		}
		n, _ := big.NewFloat(f).Int(nil)
		return n, nil
	case pyjson.KindString:
		s := strings.TrimFunc(v.AsString(), unicode.IsSpace)
		if laxDecimal.MatchString(s) {
			s, _, _ = strings.Cut(s, ".")
			if n, ok := new(big.Int).SetString(strings.ReplaceAll(s, "_", ""), 10); ok {
				return n, nil
			}
		}
		return nil, &FieldError{Type: "int_parsing", Loc: loc,
			Msg: "Input should be a valid integer, unable to parse string as an integer", Input: v}
	}
	return nil, intType
}
