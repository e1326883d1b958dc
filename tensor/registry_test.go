package tensor

import (
	"errors"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	sentinel := errors.New("factory called")
	Register("test-registry", func() (Backend, error) { return nil, sentinel })
	if _, err := Open("test-registry"); !errors.Is(err, sentinel) {
		t.Fatalf("Open(test-registry) error = %v, want the factory's", err)
	}
	found := false
	for _, n := range Backends() {
		found = found || n == "test-registry"
	}
	if !found {
		t.Fatalf("Backends() = %v, missing test-registry", Backends())
	}
	if _, err := Open("no-such-backend"); err == nil || !strings.Contains(err.Error(), "no-such-backend") {
		t.Fatalf("Open(no-such-backend) error = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("second Register did not panic")
		}
	}()
	Register("test-registry", func() (Backend, error) { return nil, nil })
}

func TestShapeErrorAndNumel(t *testing.T) {
	e := &ShapeError{Op: "MatMul", Arg: "w", Shape: []int{3, 4}, Want: "[N, 5]"}
	if got, want := e.Error(), "tensor: MatMul: w has shape [3 4], want [N, 5]"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	for _, c := range []struct {
		shape []int
		n     int
	}{{nil, 1}, {[]int{7}, 7}, {[]int{3, 5, 2}, 30}, {[]int{4, 0}, 0}} {
		if got := Numel(c.shape); got != c.n {
			t.Errorf("Numel(%v) = %d, want %d", c.shape, got, c.n)
		}
	}
	if F16.String() != "F16" || BF16.String() != "BF16" || F32.String() != "F32" || DType(9).String() != "DType(9)" {
		t.Error("DType.String")
	}
}

func TestShapeChecks(t *testing.T) {
	if err := CheckMatrix("Op", "x", []int{3, 4}, -1, 4); err != nil {
		t.Errorf("[3 4] vs [*, 4]: %v", err)
	}
	for _, c := range []struct {
		shape      []int
		rows, cols int
		want       string
	}{
		{[]int{3, 4}, 3, 5, "[3, 5]"},
		{[]int{12}, -1, 4, "[*, 4]"},
		{[]int{2, 3, 4}, 2, -1, "[2, *]"},
	} {
		var se *ShapeError
		if err := CheckMatrix("Op", "x", c.shape, c.rows, c.cols); !errors.As(err, &se) || se.Want != c.want || se.Arg != "x" {
			t.Errorf("CheckMatrix(%v, %d, %d) = %v, want %s", c.shape, c.rows, c.cols, err, c.want)
		}
	}
	if err := CheckElements("Op", "g", []int{2, 3}, 6); err != nil {
		t.Errorf("6 elements: %v", err)
	}
	var se *ShapeError
	if err := CheckElements("Op", "g", []int{2, 3}, 5); !errors.As(err, &se) || se.Want != "5 elements" {
		t.Errorf("5 elements: %v", err)
	}
}
