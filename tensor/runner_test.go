package tensor

import (
	"errors"
	"testing"
)

// plain is a Backend without Run; runner adds one that counts its calls.
type plain struct{ Backend }

type runner struct {
	plain
	calls int
}

func (r *runner) Run(f func() error) error {
	r.calls++
	return f()
}

func TestRun(t *testing.T) {
	sentinel := errors.New("from f")
	for _, c := range []struct {
		name  string
		b     Backend
		ret   error
		calls int
	}{
		{"plain nil", plain{}, nil, 0},
		{"plain error", plain{}, sentinel, 0},
		{"runner nil", &runner{}, nil, 1},
		{"runner error", &runner{}, sentinel, 1},
	} {
		ran := 0
		err := Run(c.b, func() error { ran++; return c.ret })
		if err != c.ret || ran != 1 {
			t.Errorf("%s: Run returned %v after %d calls of f, want %v after 1", c.name, err, ran, c.ret)
		}
		if r, ok := c.b.(*runner); ok && r.calls != c.calls {
			t.Errorf("%s: the backend's Run was called %d times, want %d", c.name, r.calls, c.calls)
		}
	}
}
