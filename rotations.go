package kev

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kevgo/kev/internal/systemone"
)

// Order averaging. A pointer head reads every option of a question in one row, so the probabilities can move with
// the order the options are listed in. Rotate asks each choice and score question again in other orders, as extra
// questions of the same request: the state is read once and only question rows multiply. Average maps every order's
// probabilities back to the original order and takes their mean.

// Rotation is a request expanded for order averaging: each choice question followed by its cyclic rotations, each
// score question by its reversed scale. Rotate makes one; Request is what to ask the model; Orders and Average map
// the model's probabilities for it back to the original questions.
type Rotation struct {
	expanded *Request
	orders   [][]rotatedOrder // per original question: the orders asked, the original first
}

// rotatedOrder is one order of a question: the expanded request's question index that asks it, and for each
// position of that question the original option (or level) index shown there.
type rotatedOrder struct {
	q    int
	perm []int
}

// Rotate expands req for averaging over n option orders: a choice question with K options is asked in its first
// min(n, K) cyclic rotations (rotation r lists option r first, the others following in their order and wrapping
// around); a score question with more than one level is asked in its order and, for n ≥ 2, with its scale reversed
// (lowest level last); a noul is asked once. The added questions follow the original ones, with ids derived from
// theirs that the request does not use. n ≤ 1 leaves the request as it is. A request that does not validate is
// refused with Validate's error.
func Rotate(req *Request, n int) (*Rotation, error) {
	if req == nil {
		return nil, fmt.Errorf("kev: Rotate: nil request")
	}
	if err := toSysRequest(req).Validate(); err != nil {
		return nil, publicError(err)
	}
	used := make(map[string]bool, len(req.Questions))
	for _, e := range req.Questions {
		used[e.ID] = true
	}
	out := &Request{Model: req.Model, State: req.State, Questions: append([]QuestionEntry(nil), req.Questions...)}
	r := &Rotation{expanded: out, orders: make([][]rotatedOrder, len(req.Questions))}
	for i, e := range req.Questions {
		k := optionCount(e.Question)
		r.orders[i] = []rotatedOrder{{q: i, perm: identity(k)}}
		for _, perm := range orderPerms(e.Question.Type, k, n) {
			q := permuted(e.Question, perm)
			id := derivedID(e.ID, len(r.orders[i]), used)
			r.orders[i] = append(r.orders[i], rotatedOrder{q: len(out.Questions), perm: perm})
			out.Questions = append(out.Questions, QuestionEntry{ID: id, Question: q})
		}
	}
	return r, nil
}

// orderPerms returns the orders besides the original one that a question of type t with k options is asked in.
func orderPerms(t QuestionType, k, n int) [][]int {
	var perms [][]int
	switch t {
	case TypeChoice:
		for rot := 1; rot < min(n, k); rot++ {
			p := make([]int, k)
			for j := range p {
				p[j] = (j + rot) % k
			}
			perms = append(perms, p)
		}
	case TypeScore:
		if n >= 2 && k >= 2 {
			p := make([]int, k)
			for j := range p {
				p[j] = k - 1 - j
			}
			perms = append(perms, p)
		}
	}
	return perms
}

func optionCount(q Question) int {
	switch q.Type {
	case TypeChoice:
		return len(q.Options)
	case TypeScore:
		return len(q.Levels)
	}
	return 2
}

func identity(k int) []int {
	p := make([]int, k)
	for i := range p {
		p[i] = i
	}
	return p
}

// permuted returns q with its options (or levels) listed in the order perm: position j shows original perm[j].
func permuted(q Question, perm []int) Question {
	switch q.Type {
	case TypeChoice:
		opts := make([]Option, len(perm))
		for j, o := range perm {
			opts[j] = q.Options[o]
		}
		q.Options = opts
	case TypeScore:
		levels := make([]Value, len(perm))
		for j, o := range perm {
			levels[j] = q.Levels[o]
		}
		q.Levels = levels
	}
	return q
}

// derivedID returns "id#order", with more '#' until no question of the request has it, and marks it used.
func derivedID(id string, order int, used map[string]bool) string {
	sep := "#"
	for {
		d := id + sep + strconv.Itoa(order)
		if !used[d] {
			used[d] = true
			return d
		}
		sep += "#"
	}
}

// Request returns the expanded request: the original questions in their order, then the reordered copies.
func (r *Rotation) Request() *Request { return r.expanded }

// Orders maps the model's probabilities for the expanded request (one list per question of Request, in its option
// order) back to the original questions: per original question, per order asked (the original first), the
// probabilities in the original option order.
func (r *Rotation) Orders(probs [][]float32) ([][][]float32, error) {
	if len(probs) != len(r.expanded.Questions) {
		return nil, fmt.Errorf("kev: %d probability lists for the %d questions of the rotated request", len(probs), len(r.expanded.Questions))
	}
	out := make([][][]float32, len(r.orders))
	for i, orders := range r.orders {
		out[i] = make([][]float32, len(orders))
		for o, ord := range orders {
			p := probs[ord.q]
			if len(p) != len(ord.perm) {
				return nil, fmt.Errorf("kev: question %q has %d options but %d probabilities", r.expanded.Questions[ord.q].ID, len(ord.perm), len(p))
			}
			back := make([]float32, len(p))
			for j, orig := range ord.perm {
				back[orig] = p[j]
			}
			out[i][o] = back
		}
	}
	return out, nil
}

// Average maps the model's probabilities for the expanded request back to the original questions and returns, per
// original question, the mean over its orders of each option's probability (summed in float64 in order, the
// original first, then divided by the number of orders), in the original option order.
func (r *Rotation) Average(probs [][]float32) ([][]float32, error) {
	orders, err := r.Orders(probs)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(orders))
	for i, os := range orders {
		out[i] = meanProbs(os)
	}
	return out, nil
}

// meanProbs returns the mean of equal-length probability lists, option by option: summed in float64 in
// the order given, divided by their number, rounded to float32.
func meanProbs(lists [][]float32) []float32 {
	if len(lists) == 0 {
		return nil
	}
	out := make([]float32, len(lists[0]))
	for j := range out {
		var s float64
		for _, l := range lists {
			s += float64(l[j])
		}
		out[j] = float32(s / float64(len(lists)))
	}
	return out
}

// submitRotated is submit for a predictor with Options.Rotations > 1: it validates req, asks its expansion in one
// request and hands back the original request's record with the averaged probabilities (the usage counts the
// tokens of the expansion, which is what the model read).
func (p *Predictor) submitRotated(ctx context.Context, req *systemone.Request) (*systemone.Record, *systemone.Encoding, result, error) {
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{DateFacts: p.opts.DateFacts})
	if err != nil {
		return nil, nil, result{}, err
	}
	rot, err := Rotate(fromSysRequest(req), p.opts.Rotations)
	if err != nil {
		return nil, nil, result{}, err
	}
	_, enc, r, err := p.submitOnce(ctx, toSysRequest(rot.Request()))
	if err != nil {
		return nil, nil, result{}, err
	}
	if r.probs, err = rot.Average(r.probs); err != nil {
		return nil, nil, result{}, err
	}
	return rec, enc, r, nil
}
