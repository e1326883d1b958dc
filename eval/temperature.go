package eval

import (
	"errors"
	"math"
)

// The pointer head divides its logits by the temperature T before the softmax (layers.Pointer), so probabilities
// p at temperature T₀ are softmax(z/T₀) and ln pⱼ = zⱼ/T₀ − c for one constant c per question. The probabilities at
// any other T follow from them alone: softmax(ln p · T₀/T) = softmax(z/T). A probability that was 0 in float32
// (a logit more than ~103·T₀ below the top one) stays 0.

// AtTemperature returns p, probabilities at temperature from, as they are at temperature to:
// softmax(ln p · from/to), in float64.
func AtTemperature(p []float64, from, to float64) []float64 {
	out := make([]float64, len(p))
	if from == to {
		copy(out, p)
		return out
	}
	r := from / to
	top := math.Inf(-1)
	for j, x := range p {
		out[j] = math.Log(x) * r
		top = max(top, out[j])
	}
	var s float64
	for j, z := range out {
		out[j] = math.Exp(z - top)
		s += out[j]
	}
	for j := range out {
		out[j] /= s
	}
	return out
}

// Tempered returns the items as they would be at temperature to, their probabilities having been taken at from:
// each order's probabilities rescaled (AtTemperature), then averaged over the orders as Run does.
func Tempered(items []Item, from, to float64) []Item {
	out := make([]Item, len(items))
	for i, it := range items {
		out[i] = it
		orders := make([][]float64, len(it.Orders))
		for o, p := range it.Orders {
			orders[o] = AtTemperature(p, from, to)
		}
		out[i].Orders = orders
		if len(orders) == 1 {
			out[i].Probs = orders[0]
		} else if len(orders) > 1 {
			out[i].Probs = meanOrders(orders)
		}
	}
	return out
}

// TemperatureFit is the result of FitTemperature.
type TemperatureFit struct {
	From   float64 `json:"predictor"` // the temperature the probabilities were taken at
	Fitted float64 `json:"fitted"`    // the temperature of least log loss: pass it as kev.Options.Temperature
	Before Metrics `json:"before"`    // the metrics at From
	After  Metrics `json:"after"`     // the metrics at Fitted
	// AtBound is set when Fitted is within 1e-6 (relative) of an end of the search range: the log loss still falls
	// beyond it.
	AtBound bool `json:"at_bound"`
}

// FitRange bounds FitTemperature: the fitted temperature lies within a factor FitRange of the predictor's.
const FitRange = 16

// FitTemperature finds the temperature that minimises the mean log loss of items whose probabilities were taken at
// temperature from: a 1-D search over ln T in [ln(from/FitRange), ln(from·FitRange)], a grid of 65 points and then
// golden-section search between the best point's neighbours, to a relative width of 1e-9. Accuracy does not change
// with the temperature; the other metrics do.
func FitTemperature(items []Item, from float64) (*TemperatureFit, error) {
	if !(from > 0) || math.IsInf(from, 0) {
		return nil, errors.New("eval: FitTemperature: the predictor's temperature must be a positive number")
	}
	if Compute(items).N == 0 {
		return nil, errors.New("eval: FitTemperature: no labelled questions")
	}
	loss := func(u float64) float64 { return Compute(Tempered(items, from, from*math.Exp(u))).LogLoss }
	lo, hi := -math.Log(FitRange), math.Log(FitRange)
	const grid = 65
	step := (hi - lo) / (grid - 1)
	best, bestLoss := 0.0, math.Inf(1)
	for i := range grid {
		u := lo + float64(i)*step
		if l := loss(u); l < bestLoss {
			best, bestLoss = u, l
		}
	}
	a, b := max(lo, best-step), min(hi, best+step)
	g := (math.Sqrt(5) - 1) / 2
	c, d := b-g*(b-a), a+g*(b-a)
	fc, fd := loss(c), loss(d)
	for b-a > 1e-9 {
		if fc <= fd {
			b, d, fd = d, c, fc
			c = b - g*(b-a)
			fc = loss(c)
		} else {
			a, c, fc = c, d, fd
			d = a + g*(b-a)
			fd = loss(d)
		}
	}
	u := (a + b) / 2
	if loss(u) > bestLoss { // the grid point was better than the refined one (a flat or odd objective)
		u = best
	}
	t := from * math.Exp(u)
	return &TemperatureFit{From: from, Fitted: t, Before: Compute(items), After: Compute(Tempered(items, from, t)),
		AtBound: hi-math.Abs(u) < 1e-6}, nil
}

// meanOrders is the option-by-option mean of equal-length lists, summed in float64 in order.
func meanOrders(orders [][]float64) []float64 {
	out := make([]float64, len(orders[0]))
	for _, p := range orders {
		for j, x := range p {
			out[j] += x
		}
	}
	for j := range out {
		out[j] /= float64(len(orders))
	}
	return out
}
