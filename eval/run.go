package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/kevgo/kev"
)

// Predictor returns the model's unrounded probabilities for a request: per question in request order, per class in
// the question's order. *kev.Predictor is one (loaded without Options.Rotations: Run asks the orders itself).
type Predictor interface {
	Probabilities(ctx context.Context, req *kev.Request) ([][]float32, error)
}

// Item is one answered, labelled question.
type Item struct {
	Line     int              `json:"line"`     // the input line it came from
	Question string           `json:"question"` // its id
	Type     kev.QuestionType `json:"type"`
	Keys     []string         `json:"keys"`     // its classes, in order (see Keys)
	Expected int              `json:"expected"` // the expected class's index in Keys
	Probs    []float64        `json:"p"`        // per class: the mean over Orders
	// Orders holds, per option order asked (the request's own first), the model's probabilities in Keys order,
	// each renormalised to sum 1 in float64. One order unless Run was asked for rotations.
	Orders [][]float64 `json:"orders,omitempty"`
}

// Spread is the item's order sensitivity: the largest difference between two orders' probabilities of one class,
// max over classes of (max − min over orders); 0 with one order.
func (it Item) Spread() float64 {
	var s float64
	for k := range it.Probs {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range it.Orders {
			lo, hi = min(lo, p[k]), max(hi, p[k])
		}
		if len(it.Orders) > 1 {
			s = max(s, hi-lo)
		}
	}
	return s
}

// Options configure Run. The zero value asks each request once in its own order, eight at a time, and fits no
// temperature.
type Options struct {
	// Rotations > 1 asks every choice and score question in that many option orders (kev.Rotate: cyclic rotations
	// of a choice, the reversed scale of a score) within one request per line, and scores the mean probabilities.
	Rotations int
	// FitTemperature finds the temperature of least log loss (FitTemperature) and reports the metrics before and
	// after.
	FitTemperature bool
	// Temperature is the temperature the predictor's probabilities are at; 0 asks the predictor's Info (a
	// *kev.Predictor's head temperature). Needed only to fit one.
	Temperature float64
	// Concurrency is the number of requests kept in flight (the predictor batches them); 0 means 8. The results
	// do not depend on it.
	Concurrency int
	// Progress, when set, is called after each line with the lines done and the total.
	Progress func(done, total int)
}

// Report is the result of Run.
type Report struct {
	Overall     Metrics                      `json:"overall"`
	Types       map[kev.QuestionType]Metrics `json:"types"`     // per question type present
	Questions   []QuestionMetrics            `json:"questions"` // per question id, in order of first appearance
	Reliability map[kev.QuestionType][]Bin   `json:"reliability"`
	Temperature *TemperatureFit              `json:"temperature,omitempty"` // with Options.FitTemperature
	Rotations   *RotationStats               `json:"rotations,omitempty"`   // with Options.Rotations > 1
	Records     int                          `json:"records"`               // input lines asked
	Skipped     []Skipped                    `json:"skipped,omitempty"`     // lines the predictor refused
	Compare     *Comparison                  `json:"compare,omitempty"`     // another run beside this one (Compare), when set
	Items       []Item                       `json:"-"`                     // every scored question, in input order
}

// QuestionMetrics are the metrics of one question id.
type QuestionMetrics struct {
	ID   string           `json:"id"`
	Type kev.QuestionType `json:"type"`
	Metrics
}

// RotationStats say how much the answers moved with the order of the options, which averaging over the orders
// removes.
type RotationStats struct {
	N         int     `json:"n"`              // orders asked at most
	Questions int     `json:"questions"`      // scored questions asked in more than one order
	MaxDelta  float64 `json:"max_delta"`      // the largest Item.Spread: max |Δp| across orders
	MeanDelta float64 `json:"mean_delta"`     // the mean Item.Spread over those questions
	Flips     int     `json:"argmax_changes"` // questions whose most likely class differs between two orders
	Single    Metrics `json:"single_order"`   // the metrics of the request's own order alone
}

// Skipped is a line the predictor refused (a state or row over its limits), with the refusal.
type Skipped struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// Run reads labelled requests from r (ReadExamples), asks p for each line's probabilities and scores them. A line
// that cannot be read stops Run before anything is asked; a line the predictor refuses for its length (a
// *kev.StateTooLongError or *kev.RowTooLongError) is listed in Report.Skipped; any other predictor error stops Run.
func Run(ctx context.Context, p Predictor, r io.Reader, opts Options) (*Report, error) {
	examples, err := ReadExamples(r)
	if err != nil {
		return nil, err
	}
	return RunExamples(ctx, p, examples, opts)
}

// RunExamples is Run on examples already read.
func RunExamples(ctx context.Context, p Predictor, examples []Example, opts Options) (*Report, error) {
	if len(examples) == 0 {
		return nil, errors.New("eval: no labelled requests")
	}
	workers := opts.Concurrency
	if workers <= 0 {
		workers = 8
	}
	type outcome struct {
		items   []Item
		skipped string
		err     error
	}
	results := make([]outcome, len(examples))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range min(workers, len(examples)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				items, err := ask(ctx, p, &examples[i], opts.Rotations)
				if detail, ok := admissionDetail(err); ok {
					results[i] = outcome{skipped: detail}
				} else if err != nil {
					results[i] = outcome{err: &LineError{Line: examples[i].Line, Err: err}}
					cancel()
				} else {
					results[i] = outcome{items: items}
				}
				mu.Lock()
				done++
				if opts.Progress != nil {
					opts.Progress(done, len(examples))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range examples {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	rep := &Report{Records: len(examples)}
	for i, o := range results {
		if o.err != nil {
			return nil, o.err
		}
		if o.skipped != "" {
			rep.Skipped = append(rep.Skipped, Skipped{Line: examples[i].Line, Error: o.skipped})
		}
		rep.Items = append(rep.Items, o.items...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.summarize()
	if opts.Rotations > 1 {
		rep.Rotations = rotationStats(rep.Items, opts.Rotations)
	}
	if opts.FitTemperature {
		t := opts.Temperature
		if t == 0 {
			if ip, ok := p.(interface{ Info() kev.Info }); ok {
				t = ip.Info().Temperature
			}
		}
		if t == 0 {
			return nil, errors.New("eval: fitting a temperature needs the predictor's temperature (Options.Temperature)")
		}
		fit, err := FitTemperature(rep.Items, t)
		if err != nil {
			return nil, err
		}
		rep.Temperature = fit
	}
	return rep, nil
}

// ask answers one example, in n orders when n > 1, and returns its labelled questions.
func ask(ctx context.Context, p Predictor, ex *Example, n int) ([]Item, error) {
	var orders [][][]float32
	if n > 1 {
		rot, err := kev.Rotate(ex.Request, n)
		if err != nil {
			return nil, err
		}
		probs, err := p.Probabilities(ctx, rot.Request())
		if err != nil {
			return nil, err
		}
		if orders, err = rot.Orders(probs); err != nil {
			return nil, err
		}
	} else {
		probs, err := p.Probabilities(ctx, ex.Request)
		if err != nil {
			return nil, err
		}
		if len(probs) != len(ex.Request.Questions) {
			return nil, fmt.Errorf("the predictor gave %d probability lists for %d questions", len(probs), len(ex.Request.Questions))
		}
		for _, ps := range probs {
			orders = append(orders, [][]float32{ps})
		}
	}
	var items []Item
	for i, e := range ex.Request.Questions {
		want, ok := ex.Expected[e.ID]
		if !ok {
			continue
		}
		it := Item{Line: ex.Line, Question: e.ID, Type: e.Question.Type, Keys: Keys(e.Question), Expected: want}
		for _, ps := range orders[i] {
			if len(ps) != len(it.Keys) {
				return nil, fmt.Errorf("question %q: %d probabilities for %d classes", e.ID, len(ps), len(it.Keys))
			}
			it.Orders = append(it.Orders, normalized(ps))
		}
		if len(it.Orders) == 1 {
			it.Probs = it.Orders[0]
		} else {
			it.Probs = meanOrders(it.Orders)
		}
		items = append(items, it)
	}
	return items, nil
}

// normalized widens float32 probabilities and divides them by their sum (summed in order); all zeros (or a
// non-finite sum) give the uniform distribution.
func normalized(ps []float32) []float64 {
	out := make([]float64, len(ps))
	var s float64
	for j, x := range ps {
		out[j] = float64(x)
		s += out[j]
	}
	for j := range out {
		if s > 0 && !math.IsInf(s, 0) && !math.IsNaN(s) {
			out[j] /= s
		} else {
			out[j] = 1 / float64(len(out))
		}
	}
	return out
}

// summarize fills the overall, per-type and per-question metrics and the reliability bins from the items.
func (rep *Report) summarize() {
	rep.Overall = Compute(rep.Items)
	rep.Types = map[kev.QuestionType]Metrics{}
	rep.Reliability = map[kev.QuestionType][]Bin{}
	for _, t := range []kev.QuestionType{kev.TypeNoul, kev.TypeChoice, kev.TypeScore} {
		var its []Item
		for _, it := range rep.Items {
			if it.Type == t {
				its = append(its, it)
			}
		}
		if len(its) > 0 {
			rep.Types[t] = Compute(its)
			rep.Reliability[t] = Reliability(TopConfidence(its))
		}
	}
	index := map[string]int{}
	var groups [][]Item
	for _, it := range rep.Items {
		i, ok := index[it.Question]
		if !ok {
			i = len(groups)
			index[it.Question] = i
			groups = append(groups, nil)
			rep.Questions = append(rep.Questions, QuestionMetrics{ID: it.Question, Type: it.Type})
		}
		groups[i] = append(groups[i], it)
	}
	for i, g := range groups {
		rep.Questions[i].Metrics = Compute(g)
	}
}

func rotationStats(items []Item, n int) *RotationStats {
	rs := &RotationStats{N: n}
	single := make([]Item, len(items))
	var sum float64
	for i, it := range items {
		single[i] = it
		single[i].Probs = it.Orders[0]
		if len(it.Orders) < 2 {
			continue
		}
		rs.Questions++
		s := it.Spread()
		sum += s
		rs.MaxDelta = max(rs.MaxDelta, s)
		top := argmax(it.Orders[0])
		for _, p := range it.Orders[1:] {
			if argmax(p) != top {
				rs.Flips++
				break
			}
		}
	}
	if rs.Questions > 0 {
		rs.MeanDelta = sum / float64(rs.Questions)
	}
	rs.Single = Compute(single)
	return rs
}

// admissionDetail reports whether err is a predictor's refusal of a request for its length (state or a question
// row over the model's limit), and its message: such lines are skipped rather than ending the run.
func admissionDetail(err error) (string, bool) {
	var se *kev.StateTooLongError
	var re *kev.RowTooLongError
	if errors.As(err, &se) || errors.As(err, &re) {
		return err.Error(), true
	}
	return "", false
}
