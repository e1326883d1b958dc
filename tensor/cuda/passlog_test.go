//go:build cuda

package cuda

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// bufferCloser is a bytes.Buffer the pass log can close.
type bufferCloser struct{ bytes.Buffer }

func (*bufferCloser) Close() error { return nil }

// TestPassLog runs one pass (two GEMMs and a read-back) inside Run with the pass log on, every launch logged, and
// checks its line: the pass's host time, its launches, a wait per synchronisation, the read-back's wait within the
// pass and after every launch, and each launch named, launched before it and finished in launch order.
func TestPassLog(t *testing.T) {
	r := newRand(t)
	var out bufferCloser
	do(t, func(q *Queue) error {
		q.d.plog = &passLog{w: &out, perLaunch: true}
		return nil
	})
	defer do(t, func(q *Queue) error { q.d.plog = nil; return nil })
	const M, N, K = 100, 256, 512
	x := randBF16(r, M*K, 1)
	w := randBF16(r, N*K, 1/math.Sqrt(K))
	var X, W, Y Buffer
	do(t, func(q *Queue) error {
		X, W, Y = upload(t, q, bytesOf16(x), 0), upload(t, q, bytesOf16(w), 0), poisoned(t, q, 2*M*N)
		return nil
	})
	defer do(t, func(q *Queue) error { q.Free(X); q.Free(W); q.Free(Y); return nil })
	err := dev.Run(func() error {
		return dev.Do(func(q *Queue) error {
			for range 2 {
				if err := q.GEMM(GEMM{Y: Y, X: X, W: W, M: M, N: N, K: K}); err != nil {
					return err
				}
			}
			download(t, q, Y, 2*M*N)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1:\n%s", len(lines), out.String())
	}
	var p struct {
		HostMS   float64 `json:"host_ms"`
		Launches int     `json:"launches"`
		Syncs    int     `json:"syncs"`
		Waits    []struct {
			HostMS   float64 `json:"host_ms"`
			DeviceMS float64 `json:"device_ms"`
		} `json:"waits"`
		Launch [][3]any `json:"launch"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &p); err != nil {
		t.Fatalf("%v: %s", err, lines[0])
	}
	if p.HostMS <= 0 || p.Launches < 2 || p.Syncs < 1 || len(p.Waits) != p.Syncs || len(p.Launch) != p.Launches {
		t.Fatalf("pass line %s", lines[0])
	}
	wt := p.Waits[len(p.Waits)-1] // the read-back's
	if wt.HostMS < 0 || wt.HostMS > p.HostMS || wt.DeviceMS < 0 {
		t.Errorf("wait at %.3f ms on the host, %.3f ms on the device, in a pass of %.3f ms", wt.HostMS, wt.DeviceMS, p.HostMS)
	}
	prev := 0.0
	for i, l := range p.Launch {
		name, _ := l[0].(string)
		host, _ := l[1].(float64)
		devMS, _ := l[2].(float64)
		if !strings.HasPrefix(name, "gemm") || host < 0 || host > wt.HostMS || devMS < prev || devMS > wt.DeviceMS {
			t.Errorf("launch %d %v: want a GEMM launched before the wait and finished in order, by the wait's device time %.3f", i, l, wt.DeviceMS)
		}
		prev = devMS
	}
}
