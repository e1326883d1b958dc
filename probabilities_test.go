package kev

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/kevgo/kev/internal/systemone"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestProbabilities checks the unrounded probabilities against the PyTorch reference of tiny-a, against Do's
// answers for the same request, and a second call (a prefix-cache hit) against the first, bit for bit.
func TestProbabilities(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "tiny-a")
	data, err := os.ReadFile(filepath.Join(dir, "reference", "cases.json"))
	if err != nil {
		t.Skip("golden fixture not present:", err)
	}
	var ref struct {
		Cases []struct {
			Name          string          `json:"name"`
			Request       json.RawMessage `json:"request"`
			Probabilities [][]float32     `json:"probabilities"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("no reference cases")
	}
	ctx := context.Background()
	p, err := Load(ctx, filepath.Join(dir, "kev"), Options{Base: filepath.Join(dir, "base")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, c := range shortCases(ref.Cases, 3) {
		req, err := systemone.DecodeRequest(c.Request)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		got, err := p.Probabilities(ctx, fromSysRequest(req))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if len(got) != len(c.Probabilities) || len(got) != len(req.Questions) {
			t.Fatalf("%s: %d questions answered, reference %d, request %d", c.Name, len(got), len(c.Probabilities), len(req.Questions))
		}
		for q := range got {
			if len(got[q]) != len(c.Probabilities[q]) {
				t.Fatalf("%s question %d: %d probabilities, want %d", c.Name, q, len(got[q]), len(c.Probabilities[q]))
			}
			var sum float64
			for k, v := range got[q] {
				sum += float64(v)
				if d := math.Abs(float64(v - c.Probabilities[q][k])); d > 1e-4 {
					t.Errorf("%s question %d option %d: %v, reference %v", c.Name, q, k, v, c.Probabilities[q][k])
				}
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Errorf("%s question %d: probabilities sum to %v", c.Name, q, sum)
			}
		}

		again, err := p.probabilities(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for q := range got {
			for k := range got[q] {
				if math.Float32bits(again[q][k]) != math.Float32bits(got[q][k]) {
					t.Errorf("%s question %d option %d: %v on the second call, %v on the first", c.Name, q, k, again[q][k], got[q][k])
				}
			}
		}

		resp, err := p.do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := systemone.ToAnswers(rec, got)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := compactAnswersOf(t, resp.Answers), compactAnswersOf(t, want); a != b {
			t.Errorf("%s: Do answered %s, the probabilities give %s", c.Name, a, b)
		}
	}
}

func compactAnswersOf(t *testing.T, a []systemone.AnswerEntry) string {
	t.Helper()
	b, err := json.Marshal(systemone.AnswersValue(a))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestProbabilitiesErrors(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "tiny-a")
	ctx := context.Background()
	p, err := Load(ctx, filepath.Join(dir, "kev"), Options{Base: filepath.Join(dir, "base")})
	if err != nil {
		t.Skip("golden fixture not loadable:", err)
	}
	if _, err := p.probabilities(ctx, nil); err == nil {
		t.Error("nil request: no error")
	}
	var ve *systemone.ValidationError
	if _, err := p.probabilities(ctx, systemone.NewRequest("a state")); !errors.As(err, &ve) {
		t.Errorf("no questions: %v, want a *ValidationError", err)
	}
	// The public method: Go types in, the package's typed errors out.
	var pve *ValidationError
	if _, err := p.Probabilities(ctx, NewRequest("a state")); !errors.As(err, &pve) {
		t.Errorf("public, no questions: %v, want a *kev.ValidationError", err)
	}
	if _, err := p.Probabilities(ctx, nil); err == nil {
		t.Error("public, nil request: no error")
	}
	if got, err := p.Probabilities(ctx, NewRequest("a state", Noul("q", "Is it?"))); err != nil || len(got) != 1 || len(got[0]) != 2 {
		t.Errorf("public: %v %v", got, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.probabilities(done, systemone.NewRequest("a state", systemone.Noul("q", "Is it?"))); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	p.Close()
	if _, err := p.probabilities(ctx, systemone.NewRequest("a state", systemone.Noul("q", "Is it?"))); !errors.Is(err, ErrClosed) {
		t.Errorf("closed predictor: %v, want ErrClosed", err)
	}
}

// memBackend is a backend that reports device memory.
type memBackend struct {
	tensor.Backend
	held, free int64
}

func (b memBackend) MemStats() (held, cached int64) { return b.held, b.free }

func TestDeviceMemory(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "tiny-a")
	p, err := Load(context.Background(), filepath.Join(dir, "kev"), Options{Base: filepath.Join(dir, "base")})
	if err != nil {
		t.Skip("golden fixture not loadable:", err)
	}
	defer p.Close()
	if held, free, ok := p.deviceMemory(); ok || held != 0 || free != 0 {
		t.Errorf("cpu backend: DeviceMemory() = %d, %d, %v; want 0, 0, false", held, free, ok)
	}
	q := &Predictor{engines: []*engine{{backend: memBackend{held: 9 << 30, free: 3 << 20}}}}
	if held, free, ok := q.deviceMemory(); !ok || held != 9<<30 || free != 3<<20 {
		t.Errorf("reporting backend: DeviceMemory() = %d, %d, %v; want %d, %d, true", held, free, ok, int64(9<<30), int64(3<<20))
	}
}
