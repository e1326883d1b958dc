package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"github.com/kevgo/kev/internal/systemone"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kevgo/kev"
)

// fakePredictor answers from the options' text and positions, with a pull towards the first position, so that the
// order of the options matters. It records the requests it was asked.
type fakePredictor struct {
	mu    sync.Mutex
	asked []*kev.Request
	fail  string // a state that makes it fail
	long  string // a state it refuses for its length
}

func (f *fakePredictor) Probabilities(_ context.Context, req *kev.Request) ([][]float32, error) {
	f.mu.Lock()
	f.asked = append(f.asked, req)
	f.mu.Unlock()
	switch req.State.String() {
	case f.fail:
		return nil, errors.New("device lost")
	case f.long:
		return nil, &kev.StateTooLongError{Tokens: 70000, Limit: systemone.MaxStateTokens}
	}
	out := make([][]float32, len(req.Questions))
	for i, e := range req.Questions {
		keys := Keys(e.Question)
		z := make([]float64, len(keys))
		for j := range z {
			text := keys[j]
			if e.Question.Type == kev.TypeScore {
				text = e.Question.Levels[j].String()
			}
			z[j] = float64(len(text)%5)*0.4 + float64(len(req.State.String())%3)*0.1*float64(j) - 0.3*float64(j)
		}
		var s float64
		for j := range z {
			z[j] = math.Exp(z[j])
			s += z[j]
		}
		out[i] = make([]float32, len(z))
		for j := range z {
			out[i][j] = float32(z[j] / s)
		}
	}
	return out, nil
}

func fakeInput(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `{"state": "ticket %s", "questions": {"team": {"type": "choice", "criteria": {"billing": 1, "shipping": 2, "returns": 3, "other": 4}}, `+
			`"urgent": {"type": "noul"}, "level": {"type": "score", "criteria": ["low", "medium", "high"]}}, "expected": {"team": %q, "urgent": %v, "level": %d}}`+"\n",
			strings.Repeat("x", i), []string{"billing", "shipping", "returns", "other"}[i%4], i%2 == 0, i%3)
	}
	return sb.String()
}

func TestRunRotations(t *testing.T) {
	ctx := context.Background()
	fp := &fakePredictor{}
	var progress []int
	rep, err := Run(ctx, fp, strings.NewReader(fakeInput(12)), Options{Rotations: 3, Concurrency: 1, Progress: func(done, total int) {
		if total != 12 {
			t.Errorf("total %d", total)
		}
		progress = append(progress, done)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.asked) != 12 || len(progress) != 12 || progress[11] != 12 {
		t.Fatalf("%d requests, progress %v: want one request per line", len(fp.asked), progress)
	}
	// One request per line: the three questions, two more orders of the choice and one of the score.
	if n := len(fp.asked[0].Questions); n != 6 {
		t.Errorf("the rotated request has %d questions, want 6", n)
	}
	if rep.Overall.N != 36 || rep.Records != 12 || len(rep.Questions) != 3 || len(rep.Types) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, it := range rep.Items {
		want := map[kev.QuestionType]int{kev.TypeNoul: 1, kev.TypeChoice: 3, kev.TypeScore: 2}[it.Type]
		if len(it.Orders) != want {
			t.Fatalf("%s: %d orders, want %d", it.Question, len(it.Orders), want)
		}
		for k := range it.Probs {
			var s float64
			for _, o := range it.Orders {
				s += o[k]
			}
			if !near(it.Probs[k], s/float64(len(it.Orders)), 1e-15) {
				t.Fatalf("%s: p %v is not the mean of %v", it.Question, it.Probs, it.Orders)
			}
		}
	}
	rs := rep.Rotations
	if rs == nil || rs.N != 3 || rs.Questions != 24 || !(rs.MaxDelta > 0.05) || !(rs.MeanDelta > 0) || rs.MeanDelta > rs.MaxDelta || rs.Single.N != 36 {
		t.Fatalf("rotation stats %+v", rs)
	}
	// The single-order metrics are those of a run without rotations.
	plain, err := Run(ctx, &fakePredictor{}, strings.NewReader(fakeInput(12)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := jsonOf(t, plain.Overall), jsonOf(t, rs.Single); a != b {
		t.Errorf("single order %s, plain run %s", b, a)
	}
	if plain.Rotations != nil {
		t.Error("rotation stats without rotations")
	}
	// Concurrency changes nothing.
	conc, err := Run(ctx, &fakePredictor{}, strings.NewReader(fakeInput(12)), Options{Rotations: 3, Concurrency: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := jsonOf(t, rep), jsonOf(t, conc); a != b {
		t.Errorf("concurrency changed the report:\n%s\n%s", a, b)
	}
	// The table names every question and the rotation line.
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"team", "urgent", "level", "overall", "all choice", "rotations: up to 3 orders"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	in := fakeInput(5)
	lines := strings.Split(strings.TrimSpace(in), "\n")
	fp := &fakePredictor{fail: "ticket xx", long: "ticket x"}
	_, err := Run(ctx, fp, strings.NewReader(in), Options{Concurrency: 2})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("error %v, want line 3's predictor error", err)
	}
	fp = &fakePredictor{long: "ticket x"}
	rep, err := Run(ctx, fp, strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Line != 2 || rep.Overall.N != 12 || !strings.Contains(rep.Skipped[0].Error, "70,000") {
		t.Errorf("skipped %+v, n %d", rep.Skipped, rep.Overall.N)
	}
	bad := strings.Join(append(lines[:2:2], `{"state": "s"}`), "\n")
	fp = &fakePredictor{}
	if _, err := Run(ctx, fp, strings.NewReader(bad), Options{}); !errors.As(err, &le) || le.Line != 3 || len(fp.asked) != 0 {
		t.Errorf("error %v after %d requests, want line 3 refused before anything is asked", err, len(fp.asked))
	}
	if _, err := Run(ctx, fp, strings.NewReader(in), Options{FitTemperature: true}); err == nil {
		t.Error("a temperature was fitted without the predictor's temperature")
	}
	if _, err := Run(ctx, fp, strings.NewReader("\n"), Options{}); err == nil {
		t.Error("empty input accepted")
	}
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSVG: the reliability diagram parses as XML and has, per question type, one point per non-empty bin where
// PointXY puts it.
func TestSVG(t *testing.T) {
	_, groups := readFixture(t)
	rep := &Report{}
	for _, g := range groups {
		rep.Items = append(rep.Items, g...)
	}
	rep.summarize()
	var buf bytes.Buffer
	if err := rep.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	type circle struct {
		Class string  `xml:"class,attr"`
		CX    float64 `xml:"cx,attr"`
		CY    float64 `xml:"cy,attr"`
		N     int     `xml:"data-n,attr"`
		Conf  float64 `xml:"data-confidence,attr"`
		Acc   float64 `xml:"data-accuracy,attr"`
	}
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Panels  []struct {
			Type    string   `xml:"data-type,attr"`
			Circles []circle `xml:"circle"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("SVG is not XML: %v\n%s", err, buf.String())
	}
	if doc.XMLName.Space != "http://www.w3.org/2000/svg" || len(doc.Panels) != 3 {
		t.Fatalf("namespace %q, %d panels", doc.XMLName.Space, len(doc.Panels))
	}
	for i, panel := range doc.Panels {
		typ := kev.QuestionType(panel.Type)
		if typ != typeOrder[i] {
			t.Errorf("panel %d is %q, want %q", i, typ, typeOrder[i])
		}
		var want []Bin
		for _, b := range rep.Reliability[typ] {
			if b.N > 0 {
				want = append(want, b)
			}
		}
		if len(panel.Circles) != len(want) || len(want) < 3 {
			t.Fatalf("%s: %d points, want %d", typ, len(panel.Circles), len(want))
		}
		for k, c := range panel.Circles {
			b := want[k]
			x, y := PointXY(i, b.Confidence, b.Accuracy)
			if c.Class != "bin" || c.N != b.N || !near(c.CX, x, 1e-3) || !near(c.CY, y, 1e-3) || !near(c.Conf, b.Confidence, 1e-6) || !near(c.Acc, b.Accuracy, 1e-6) {
				t.Errorf("%s point %d: %+v, want bin %+v at (%.4f, %.4f)", typ, k, c, b, x, y)
			}
			if c.CX < float64(i*panelW) || c.CX > float64((i+1)*panelW) || c.CY < 0 || c.CY > panelH {
				t.Errorf("%s point %d at (%v, %v) is outside its panel", typ, k, c.CX, c.CY)
			}
		}
	}
}

// The bundled test checkpoint: random weights, so the numbers mean nothing, but they are exact.
var (
	tinyRun  = filepath.Join("..", "testdata", "golden", "tiny-a", "kev")
	tinyBase = filepath.Join("..", "testdata", "golden", "tiny-a", "base")
)

func loadTiny(t testing.TB, opts kev.Options) *kev.Predictor {
	t.Helper()
	if _, err := os.Stat(tinyRun); err != nil {
		t.Skip("bundled test checkpoint not present")
	}
	opts.Base = tinyBase
	p, err := kev.Load(context.Background(), tinyRun, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestRefitMatchesTemperature: probabilities refitted from the head's temperature to T equal those of a predictor
// loaded with Options.Temperature = T, on every question of the worked example.
func TestRefitMatchesTemperature(t *testing.T) {
	ctx := context.Background()
	base := loadTiny(t, kev.Options{})
	from := base.Info().Temperature
	exs, err := readTickets(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []float64{0.35, 1.3, from, 9.5} {
		other := loadTiny(t, kev.Options{Temperature: to})
		var worst, moved float64
		for _, ex := range exs {
			p0, err := base.Probabilities(ctx, ex.Request)
			if err != nil {
				t.Fatal(err)
			}
			pt, err := other.Probabilities(ctx, ex.Request)
			if err != nil {
				t.Fatal(err)
			}
			for q := range p0 {
				got, want := AtTemperature(normalized(p0[q]), from, to), normalized(pt[q])
				for k := range got {
					worst = max(worst, math.Abs(got[k]-want[k]))
					moved = max(moved, math.Abs(want[k]-float64(p0[q][k])))
				}
			}
		}
		t.Logf("T %.3g → %.3g: max |Δp| refit vs loaded %.2g (the temperature moved p by up to %.3g)", from, to, worst, moved)
		if worst > 1e-6 {
			t.Errorf("T = %v: refit differs from the loaded predictor by %g", to, worst)
		}
		if to != from && moved < 0.01 {
			t.Errorf("T = %v moved no probability: the comparison is empty", to)
		}
	}
}

// TestRunMatchesLibraryRotations: Run's rotation average is the one a predictor with Options.Rotations returns,
// from a single request per line.
func TestRunMatchesLibraryRotations(t *testing.T) {
	ctx := context.Background()
	p := loadTiny(t, kev.Options{})
	rotated := loadTiny(t, kev.Options{Rotations: 3})
	f, err := os.Open(filepath.Join("testdata", "tickets.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Run(ctx, p, f, Options{Rotations: 3})
	if err != nil {
		t.Fatal(err)
	}
	exs, _ := readTickets(t)
	k := 0
	for _, ex := range exs {
		probs, err := rotated.Probabilities(ctx, ex.Request)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range ex.Request.Questions {
			if _, ok := ex.Expected[e.ID]; !ok {
				continue
			}
			it := rep.Items[k]
			k++
			if it.Question != e.ID || it.Line != ex.Line {
				t.Fatalf("item %d is %s line %d, want %s line %d", k, it.Question, it.Line, e.ID, ex.Line)
			}
			for j, x := range normalized(probs[i]) {
				if !near(it.Probs[j], x, 2e-7) {
					t.Errorf("line %d %s: eval %v, library %v", ex.Line, e.ID, it.Probs, probs[i])
				}
			}
		}
	}
	if k != len(rep.Items) || rep.Rotations.MaxDelta == 0 {
		t.Errorf("%d of %d items compared; max |Δp| %v", k, len(rep.Items), rep.Rotations.MaxDelta)
	}
}

func readTickets(t testing.TB) ([]Example, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tickets.jsonl"))
	if err != nil {
		return nil, err
	}
	return ReadExamples(bytes.NewReader(data))
}
