package cpu

import (
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

func TestConformance(t *testing.T) {
	backendtest.RunAll(t, New(), backendtest.FP32)
}

func TestConformanceOneThread(t *testing.T) {
	backendtest.RunAll(t, &Backend{Threads: 1}, backendtest.FP32)
}

// TestConformanceGeneric keeps the plain Go MatMul kernel covered on
// processors that have a faster one.
func TestConformanceGeneric(t *testing.T) {
	backendtest.RunAll(t, &Backend{Threads: 2, generic: true}, backendtest.FP32)
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
