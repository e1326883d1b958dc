//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// pass runs a prefill of ids and rows continuing it, and returns both hidden states on the host. It makes no
// testing calls, so it may run inside Run.
func pass(be tensor.Backend, m *layers.Model, ids []int32, rows [][]int32) (prefill, cont []float32, err error) {
	s, h, err := m.Prefill(ids)
	if err != nil {
		return nil, nil, err
	}
	defer s.Free()
	defer be.Free(h)
	r, err := m.ContinueRows(s, rows)
	if err != nil {
		return nil, nil, err
	}
	defer be.Free(r)
	if prefill, err = be.ToHost(h); err != nil {
		return nil, nil, err
	}
	cont, err = be.ToHost(r)
	return prefill, cont, err
}

// sameBits reports the first position where got and want differ bit for bit (−1: none).
func sameBits(got, want []float32) int {
	if len(got) != len(want) {
		return 0
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// TestRun runs a model pass with every operation handed over to the device goroutine, then the same pass inside
// Backend.Run, where they are called on it directly: the results must be the same bits (every kernel is
// deterministic), the pass inside Run must cost one hand-over in all, and once the pool is warm the operations
// of a pass must neither wait for the stream nor allocate from the driver.
func TestRun(t *testing.T) {
	r := newRand(t)
	c := modelConfigs()["aligned"]
	w := modelWeights(r, c)
	gb := NewOn(dev)
	defer gb.Trim()
	m, err := layers.New(gb, w)
	if err != nil {
		t.Fatal(err)
	}
	ids := randomIDs(r, 70, c.VocabSize)
	rows := [][]int32{randomIDs(r, 7, c.VocabSize), randomIDs(r, 1, c.VocabSize), randomIDs(r, 40, c.VocabSize)}
	wantP, wantR, err := pass(gb, m, ids, rows)
	if err != nil {
		t.Fatal(err)
	}
	s0 := gb.Stats()
	var gotP, gotR []float32
	var inPass Stats
	err = gb.Run(func() error {
		// The same pass without its read-back first: no waits and no driver allocations are allowed in it.
		before := gb.Stats()
		s, h, err := m.Prefill(ids)
		if err != nil {
			return err
		}
		rr, err := m.ContinueRows(s, rows)
		if err != nil {
			return err
		}
		after := gb.Stats()
		inPass = Stats{Hops: after.Hops - before.Hops, Inline: after.Inline - before.Inline,
			Launches: after.Launches - before.Launches, Syncs: after.Syncs - before.Syncs,
			Direct: after.Direct - before.Direct, DriverAllocs: after.DriverAllocs - before.DriverAllocs}
		s.Free()
		gb.Free(h, rr)
		gotP, gotR, err = pass(gb, m, ids, rows)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s1 := gb.Stats()
	t.Logf("pass inside Run: %+v", inPass)
	if hops := s1.Hops - s0.Hops; hops != 1 {
		t.Errorf("Run with two passes made %d hand-overs, want 1", hops)
	}
	if inPass.Hops != 0 || inPass.Inline < 40 || inPass.Launches < 40 {
		t.Errorf("pass inside Run: %d hand-overs, %d direct calls, %d launches; want 0, ≥ 40, ≥ 40", inPass.Hops, inPass.Inline, inPass.Launches)
	}
	if inPass.Syncs != 0 || inPass.Direct != 0 || inPass.DriverAllocs != 0 {
		t.Errorf("pass inside Run waited for the stream %d times (%d synchronous uploads) and allocated from the driver %d times; want none",
			inPass.Syncs, inPass.Direct, inPass.DriverAllocs)
	}
	if i := sameBits(gotP, wantP); i >= 0 {
		t.Errorf("prefill inside Run differs at %d: %v, want %v (relative error %.3g)", i, at(gotP, i), at(wantP, i), relErr(gotP, wantP))
	}
	if i := sameBits(gotR, wantR); i >= 0 {
		t.Errorf("rows inside Run differ at %d: %v, want %v (relative error %.3g)", i, at(gotR, i), at(wantR, i), relErr(gotR, wantR))
	}
}

func at(v []float32, i int) float32 {
	if i < len(v) {
		return v[i]
	}
	return float32(math.NaN())
}

// TestRunExclusive checks that another goroutine's operation waits until Run returns and then runs correctly,
// and that errors and panics inside Run come back from it.
func TestRunExclusive(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	x, err := gb.FromBits(tensor.BF16, []int{3, 64}, randBF16(r, 3*64, 1))
	if err != nil {
		t.Fatal(err)
	}
	wt, err := gb.FromBits(tensor.BF16, []int{16, 64}, randBF16(r, 16*64, 0.1))
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Free(x, wt)
	ref, err := gb.MatMul(x, wt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := gb.ToHost(ref)
	gb.Free(ref)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []float32, 1)
	fail := make(chan error, 1)
	var early bool
	err = gb.Run(func() error {
		go func() {
			y, err := gb.MatMul(x, wt)
			if err != nil {
				fail <- err
				return
			}
			v, err := gb.ToHost(y)
			gb.Free(y)
			if err != nil {
				fail <- err
				return
			}
			done <- v
		}()
		time.Sleep(50 * time.Millisecond)
		select {
		case <-done:
			early = true
		case <-fail:
			early = true
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if early {
		t.Fatal("another goroutine's operation ran while Run held the device")
	}
	select {
	case v := <-done:
		if i := sameBits(v, want); i >= 0 {
			t.Errorf("MatMul after Run differs at %d: %v, want %v", i, at(v, i), at(want, i))
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting operation did not run after Run returned")
	}
	sentinel := errors.New("from f")
	if err := gb.Run(func() error { return sentinel }); err != sentinel {
		t.Errorf("Run returned %v, want f's error", err)
	}
	if err := gb.Run(func() error { panic("boom in a pass") }); err == nil {
		t.Error("Run with a panicking f returned nil")
	}
	if err := gb.Run(func() error { _, err := gb.MatMul(x, wt); return err }); err != nil {
		t.Errorf("Run after a panic: %v", err)
	}
}

// TestUploadRing stages more small uploads than the ring holds, while the stream is still busy with earlier
// work, into one buffer, and reads it back: every byte must arrive although the ring wrapped several times. The
// uploads go as copies (those of whole words would otherwise go as launches).
func TestUploadRing(t *testing.T) {
	const piece, pieces = 12 << 10, 900 // 10.5 MiB through a 4 MiB ring
	defer func(v bool) { uploadByLaunch = v }(uploadByLaunch)
	uploadByLaunch = false
	do(t, func(q *Queue) error {
		big, err := q.Alloc(1 << 30)
		if err != nil {
			return err
		}
		defer q.Free(big)
		dst, err := q.Alloc(piece * pieces)
		if err != nil {
			return err
		}
		defer q.Free(dst)
		before := q.Device().Stats()
		for i := 0; i < 20; i++ { // keep the stream busy for several milliseconds
			if err := q.FillUniform(big, 1<<29, uint32(i), 1); err != nil {
				return err
			}
		}
		src := make([]byte, piece)
		for p := 0; p < pieces; p++ {
			for i := range src {
				src[i] = byte(p*131 + i*7 + i>>9)
			}
			if err := q.Upload(Buffer{dst.Ptr + cu.DevicePtr(p*piece), piece}, src); err != nil {
				return err
			}
		}
		after := q.Device().Stats()
		back := make([]byte, piece*pieces)
		if err := q.Download(back, dst); err != nil {
			return err
		}
		for p := 0; p < pieces; p++ {
			for i := 0; i < piece; i++ {
				if got, want := back[p*piece+i], byte(p*131+i*7+i>>9); got != want {
					return fmt.Errorf("piece %d byte %d = %d, want %d", p, i, got, want)
				}
			}
		}
		if n := after.Staged - before.Staged; n != pieces {
			return fmt.Errorf("%d uploads staged, want %d", n, pieces)
		}
		if n := after.Syncs - before.Syncs; n != 0 {
			return fmt.Errorf("the uploads waited for the stream %d times", n)
		}
		stalls := after.StageStalls - before.StageStalls
		t.Logf("ring stalls %d over %d uploads of %d bytes", stalls, pieces, piece)
		if stalls == 0 {
			return fmt.Errorf("the ring never waited for a copy although the stream was milliseconds behind")
		}
		return nil
	})
}
