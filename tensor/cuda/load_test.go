//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
)

// TestModulesLoadedAtOpen checks that Open loaded every module this GPU runs, from machine code on 8.x and 9.0 (no
// PTX compiled by the driver), and that loading one again costs nothing.
func TestModulesLoadedAtOpen(t *testing.T) {
	st := dev.Stats()
	want := int64(0)
	for _, m := range Modules() {
		if len(m) < 6 || m[len(m)-6:] != "_sm90a" || dev.hopper() {
			want++
		}
	}
	if st.ModulesSASS+st.ModulesJIT != want {
		t.Errorf("%d modules from machine code + %d from PTX, want %d in all", st.ModulesSASS, st.ModulesJIT, want)
	}
	if in := dev.Info(); (in.Major == 8 || (in.Major == 9 && in.Minor == 0)) && st.ModulesJIT != 0 {
		t.Errorf("%d modules compiled from PTX on compute capability %d.%d, want 0", st.ModulesJIT, in.Major, in.Minor)
	}
	if err := dev.LoadModules(); err != nil {
		t.Fatal(err)
	}
	if again := dev.Stats(); again.ModulesSASS != st.ModulesSASS || again.ModulesJIT != st.ModulesJIT {
		t.Errorf("LoadModules again loaded %d modules from machine code and %d from PTX, want none",
			again.ModulesSASS-st.ModulesSASS, again.ModulesJIT-st.ModulesJIT)
	}
	t.Logf("modules: %d from machine code, %d from PTX", st.ModulesSASS, st.ModulesJIT)
}

// TestUploadLarge uploads random buffers of sizes around the ring's slices (several slices, a partial last one,
// more slices than the ring holds) and reads them back.
func TestUploadLarge(t *testing.T) {
	r := newRand(t)
	for _, n := range []int{stageMax + 2, ringSlot - 2, ringSlot + 6, ringSlots*ringSlot + 3*ringSlot/2} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		want := bytes.Clone(src)
		before := dev.Stats().RingUploads
		got := make([]byte, n)
		err := dev.Do(func(q *Queue) error {
			buf, err := q.Alloc(int64(n))
			if err != nil {
				return err
			}
			defer q.Free(buf)
			if err := q.Upload(buf, src); err != nil {
				return err
			}
			clear(src) // the caller may reuse src once Upload returns
			if err := q.Download(got, buf); err != nil {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes: the device holds other bytes", n)
		}
		if dev.Stats().RingUploads != before+1 {
			t.Errorf("%d bytes: not uploaded through the ring", n)
		}
	}
}

// TestFromHostF16Refused checks the typed error for fp16 weights.
func TestFromHostF16Refused(t *testing.T) {
	b := NewOn(dev)
	_, err := b.FromHost(&qwen35.Tensor{Shape: []int{2, 2}, DType: qwen35.F16, F16: []uint16{0x3c00, 0x4000, 0x4200, 0x4400}})
	var de *DTypeError
	if !errors.As(err, &de) || de.DType != "F16" {
		t.Errorf("FromHost F16: %v, want a *DTypeError for F16", err)
	}
}

// TestFromHostRows uploads BF16 parts stacked by rows straight into one tensor and compares it with the upload of
// their concatenation; mixed types fall back to the concatenation.
func TestFromHostRows(t *testing.T) {
	r := newRand(t)
	b := NewOn(dev)
	mk := func(rows, cols int) *qwen35.Tensor {
		return &qwen35.Tensor{Shape: []int{rows, cols}, DType: qwen35.BF16, BF16: randBF16(r, rows*cols, 1)}
	}
	for _, parts := range [][]*qwen35.Tensor{
		{mk(3, 40), mk(5, 40)},
		{mk(4096, 2048), mk(1, 2048), mk(4096, 2048)}, // through the large-upload ring
		{mk(2, 8), {Shape: []int{3, 8}, DType: qwen35.F32, F32: make([]float32, 24)}},
	} {
		got, err := b.FromHostRows(parts...)
		if err != nil {
			t.Fatal(err)
		}
		want, err := b.FromHost(qwen35.ConcatRows(parts...))
		if err != nil {
			t.Fatal(err)
		}
		g, err := b.ToHost(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := b.ToHost(want)
		if err != nil {
			t.Fatal(err)
		}
		if len(g) != len(w) || got.DType() != want.DType() {
			t.Fatalf("%d values of %v, want %d of %v", len(g), got.DType(), len(w), want.DType())
		}
		for i := range w {
			if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
				t.Fatalf("element %d: %v, want %v", i, g[i], w[i])
			}
		}
		b.Free(got, want)
	}
}
