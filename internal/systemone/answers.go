package systemone

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/pyjson"
)

// round4 is Kev's serialisation precision, Python's round(x, 4): 255 × 0.00005 < 0.02 keeps a rounded distribution
// of the most options within TypeSafe's |sum − 1| < 0.02 tolerance.
func round4(x float64) float64 { return pyjson.Round(x, 4) }

// pySum is Python's (3.12+) sum() of floats: Neumaier's compensated summation, the compensation added at the end
// when it is non-zero and finite.
func pySum(xs []float64) float64 {
	var s, c float64
	for _, x := range xs {
		t := s + x
		if math.Abs(s) >= math.Abs(x) {
			c += float64(s-t) + x
		} else {
			c += float64(x-t) + s
		}
		s = t
	}
	if c != 0 && !math.IsInf(c, 0) && !math.IsNaN(c) {
		s += c
	}
	return s
}

// argmax is the index of the first largest value (Python's max over the indexes keyed by value).
func argmax(p []float64) int {
	best := 0
	for i := 1; i < len(p); i++ {
		if p[i] > p[best] {
			best = i
		}
	}
	return best
}

// normalize divides p by its sum, or gives the uniform distribution when the sum is 0.
func normalize(p []float64) []float64 {
	out := make([]float64, len(p))
	t := pySum(p)
	for i, x := range p {
		if t == 0 {
			out[i] = 1 / float64(len(p))
		} else {
			out[i] = x / t
		}
	}
	return out
}

// ChoiceConfidence returns (max − 1/K) / (1 − 1/K) of p normalised to sum 1 (all zeros: uniform): 0 at uniform,
// 1 at certainty; 1 for a single option. It mirrors TypeSafe's reference adapter. It is not rounded.
func ChoiceConfidence(p []float64) float64 {
	k := float64(len(p))
	if len(p) == 1 {
		return 1.0
	}
	if len(p) == 0 {
		return math.NaN()
	}
	q := normalize(p)
	return (q[argmax(q)] - 1/k) / (1 - 1/k)
}

// ScoreConfidence returns max(0, 1 − E|level − mode| / D) of p normalised to sum 1, where mode is the first most
// likely level and D the mean absolute deviation of the uniform distribution over the L levels around its mean
// (L = 2: 0.5, 3: 2/3, 4: 1, 5: 1.2): 1 when all mass is on one level, 0 at uniform or anything as spread; 1 for a
// single level. It mirrors TypeSafe's reference adapter (system-one-adapter 0.2.1). It is not rounded.
func ScoreConfidence(p []float64) float64 {
	l := len(p)
	if l == 1 {
		return 1.0
	}
	if l == 0 {
		return math.NaN()
	}
	q := normalize(p)
	mode := argmax(q)
	dev := make([]float64, l)
	mid := float64(l-1) / 2
	for i := range dev {
		dev[i] = math.Abs(float64(i) - mid)
	}
	d := pySum(dev) / float64(l)
	spread := make([]float64, l)
	for i, pi := range q {
		spread[i] = float64(pi * float64(absInt(i-mode)))
	}
	c := 1.0 - pySum(spread)/d
	if c > 0 {
		return c
	}
	return 0.0
}

func absInt(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// ToAnswers turns the model's probabilities (one list per question of rec, in its option order; float32 values
// as the pointer head gives them, widened exactly) into Kev's answers:
//
//   - noul: P(yes), the second option's probability;
//   - choice: the first most likely option's key, ChoiceConfidence, and every option's probability;
//   - score: the expected level Σ i·p_i from the unrounded probabilities, the legend, every level's probability,
//     and ScoreConfidence.
//
// Every number is rounded with Python's round(x, 4).
func ToAnswers(rec *Record, probs [][]float32) ([]AnswerEntry, error) {
	if len(probs) != len(rec.Questions) {
		return nil, fmt.Errorf("kev: %d probability lists for %d questions", len(probs), len(rec.Questions))
	}
	out := make([]AnswerEntry, len(probs))
	for k, q := range rec.Questions {
		if len(probs[k]) != len(q.Keys) {
			return nil, fmt.Errorf("kev: question %q (index %d) has %d options but %d probabilities", q.ID, k, len(q.Keys), len(probs[k]))
		}
		p := make([]float64, len(probs[k]))
		for i, x := range probs[k] {
			p[i] = float64(x)
		}
		var a Answer
		switch q.Type {
		case TypeNoul:
			a = Answer{Type: TypeNoul, Noul: round4(p[1])}
		case TypeChoice:
			a = Answer{Type: TypeChoice, Choice: q.Keys[argmax(p)], Confidence: round4(ChoiceConfidence(p)),
				Probabilities: roundedProbs(q.Keys, p)}
		case TypeScore:
			weighted := make([]float64, len(p))
			for i, pi := range p {
				weighted[i] = float64(float64(i) * pi)
			}
			a = Answer{Type: TypeScore, Score: round4(pySum(weighted)), Legend: append([]LegendEntry(nil), q.Legend...),
				Probabilities: roundedProbs(q.Keys, p), Confidence: round4(ScoreConfidence(p))}
		default:
			return nil, fmt.Errorf("kev: question %q has unknown type %q", q.ID, q.Type)
		}
		out[k] = AnswerEntry{ID: q.ID, Answer: a}
	}
	return out, nil
}

func roundedProbs(keys []string, p []float64) []Prob {
	out := make([]Prob, len(p))
	for i, x := range p {
		out[i] = Prob{Key: keys[i], P: round4(x)}
	}
	return out
}

// OutputTokens returns the usage's output_tokens: the number of tokens of Python's json.dumps of the answers
// object (separators ", " and ": ", non-ASCII as \u escapes, float repr), tokenised without escaping. A tokenizer
// that can count without holding the ids (a Counter, as the tokenizer package's) counts chunk by chunk.
func OutputTokens(tok Tokenizer, answers []AnswerEntry) int {
	text := pyjson.Dumps(AnswersValue(answers))
	if c, ok := tok.(Counter); ok {
		return c.Count(text)
	}
	return len(tok.Encode(text))
}

// Counter is a Tokenizer that counts a text's tokens with the memory of a chunk of them.
type Counter interface {
	// Count returns len(Encode(text)).
	Count(text string) int
}
