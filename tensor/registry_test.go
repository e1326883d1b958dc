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
	if F16.String() != "F16" || BF16.String() != "BF16" || F32.String() != "F32" || F8E4M3.String() != "F8E4M3" ||
		DType(9).String() != "DType(9)" {
		t.Error("DType.String")
	}
	de := &DTypeError{Backend: "cpu", DType: F8E4M3, Reason: "no FP8 here"}
	if got, want := de.Error(), "tensor: cpu backend: F8E4M3: no FP8 here"; got != want {
		t.Errorf("DTypeError = %q, want %q", got, want)
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

// TestRegistryDevices opens numbered devices of a backend registered with RegisterDevices, and checks what a
// single-device backend answers for device numbers.
func TestRegistryDevices(t *testing.T) {
	var opened []int
	RegisterDevices("test-devices", Devices{
		Open: func(ordinal int) (Backend, error) {
			opened = append(opened, ordinal)
			return nil, nil
		},
		Count: func() (int, error) { return 3, nil },
	})
	for _, n := range []int{2, 0} {
		if _, err := OpenDevice("test-devices", n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open("test-devices"); err != nil {
		t.Fatal(err)
	}
	if len(opened) != 3 || opened[0] != 2 || opened[1] != 0 || opened[2] != 0 {
		t.Errorf("opened %v, want [2 0 0]", opened)
	}
	if n, err := DeviceCount("test-devices"); n != 3 || err != nil {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	if _, err := OpenDevice("test-devices", -1); err == nil || !strings.Contains(err.Error(), "-1") {
		t.Errorf("device -1: %v", err)
	}

	calls := 0
	Register("test-single", func() (Backend, error) { calls++; return nil, nil })
	if n, err := DeviceCount("test-single"); n != 1 || err != nil {
		t.Errorf("single-device count = %d, %v", n, err)
	}
	if _, err := OpenDevice("test-single", 1); err == nil || !strings.Contains(err.Error(), "no device 1") {
		t.Errorf("device 1 of a single-device backend: %v", err)
	}
	if _, err := OpenDevice("test-single", 0); err != nil || calls != 1 {
		t.Errorf("device 0: %v, %d calls", err, calls)
	}
	if _, err := DeviceCount("no-such-backend"); err == nil {
		t.Error("DeviceCount of an unknown backend: no error")
	}
	defer func() {
		if recover() == nil {
			t.Error("RegisterDevices without Count did not panic")
		}
	}()
	RegisterDevices("test-nocount", Devices{Open: func(int) (Backend, error) { return nil, nil }})
}
