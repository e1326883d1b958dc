package cpu

import (
	"flag"
	"os"
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

// tolerance is the backend's conformance tolerance: float32 compute, except
// that a MatMul with a BF16 weight computes in bf16 (x rounded to bf16, whose
// unit roundoff is 2⁻⁸).
var tolerance = backendtest.Tolerance{F32: 1e-5, BF16: 1e-2, F16: 1e-5}

// TestMain runs the tests with every result an operation claims to write in
// full (newF32Full) poisoned with NaN first, so an element left unwritten
// fails the test that reads it — unless benchmarks run, whose times would
// count the poisoning.
func TestMain(m *testing.M) {
	flag.Parse()
	poisonDirty = flag.Lookup("test.bench").Value.String() == ""
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	backendtest.RunAll(t, New(), tolerance)
}

func TestConformanceOneThread(t *testing.T) {
	backendtest.RunAll(t, &Backend{Threads: 1}, tolerance)
}

// TestConformanceGeneric keeps the plain Go MatMul kernel covered on
// processors that have a faster one.
func TestConformanceGeneric(t *testing.T) {
	backendtest.RunAll(t, &Backend{Threads: 2, generic: true}, tolerance)
}

func TestRegistered(t *testing.T) {
	b, err := tensor.Open(Name)
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "cpu" {
		t.Fatalf("Name() = %q", b.Name())
	}
}
