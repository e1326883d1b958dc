//go:build cuda

package cudrv

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestArgsLayout(t *testing.T) {
	var a Args
	a.I32(-3).Ptr(0x1000).F32(1.5).U32(7).Bytes(make([]byte, 128), 64).U64(9)
	if a.err != nil {
		t.Fatal(a.err)
	}
	want := []int32{0, 8, 16, 20, 64, 192}
	if a.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", a.Len(), len(want))
	}
	for i, w := range want {
		if a.offs[i] != w {
			t.Errorf("parameter %d at offset %d, want %d", i, a.offs[i], w)
		}
	}
	if got := a.buf[0:4]; got[0] != 0xfd || got[3] != 0xff {
		t.Errorf("I32(-3) bytes % x", got)
	}
	if a.buf[8+1] != 0x10 {
		t.Errorf("Ptr(0x1000) bytes % x", a.buf[8:16])
	}
	a.Reset()
	if a.Len() != 0 || a.used != 0 {
		t.Fatal("Reset left parameters")
	}
	for i := 0; i < 70; i++ {
		a.I32(1)
	}
	if a.err == nil {
		t.Fatal("70 parameters accepted")
	}
	var b Args
	if b.Bytes([]byte{1}, 3); b.err == nil {
		t.Fatal("alignment 3 accepted")
	}
}

// TestArgsRaw: alignment padding is zero whatever the Args held before, so equal parameters give equal bytes,
// and SetRaw restores what Raw returned.
func TestArgsRaw(t *testing.T) {
	var a, b Args
	b.U64(^uint64(0)).U64(^uint64(0)).U64(^uint64(0)) // dirty bytes where a's padding will be
	b.Reset()
	a.I32(5).Ptr(0x2000).I32(6).U64(7)
	b.I32(5).Ptr(0x2000).I32(6).U64(7)
	ra, oa, err := a.Raw()
	if err != nil {
		t.Fatal(err)
	}
	rb, ob, _ := b.Raw()
	if string(ra) != string(rb) || fmt.Sprint(oa) != fmt.Sprint(ob) {
		t.Fatalf("equal parameters, different bytes:\n% x\n% x", ra, rb)
	}
	if len(ra) != 32 || ra[4] != 0 || ra[20] != 0 {
		t.Errorf("bytes % x", ra)
	}
	var c Args
	if err := c.SetRaw(ra, oa); err != nil {
		t.Fatal(err)
	}
	if rc, oc, _ := c.Raw(); string(rc) != string(ra) || fmt.Sprint(oc) != fmt.Sprint(oa) {
		t.Errorf("SetRaw then Raw: % x %v", rc, oc)
	}
	if err := c.SetRaw(ra, []int32{0, 40}); err == nil {
		t.Error("an offset past the bytes accepted")
	}
}

func TestErrors(t *testing.T) {
	if got := ErrorName(1); got != "CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("ErrorName(1) = %q", got)
	}
	if got := ErrorString(2); !strings.Contains(strings.ToLower(got), "memory") {
		t.Errorf("ErrorString(2) = %q", got)
	}
	oom := &Error{Op: "cuMemAlloc", Code: 2, Name: ErrorName(2)}
	var o interface{ OutOfMemory() bool }
	if !errors.As(fmt.Errorf("pass: %w", oom), &o) || !o.OutOfMemory() {
		t.Errorf("code 2 is not reported as out of memory")
	}
	if (&Error{Code: 1}).OutOfMemory() {
		t.Errorf("code 1 reported as out of memory")
	}
	err := Wrap("cuMemAlloc", errors.New("plain"))
	if err == nil || !strings.Contains(err.Error(), "cuMemAlloc") {
		t.Errorf("Wrap(plain) = %v", err)
	}
	v, err := DriverVersion()
	if err != nil || v < 11000 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	t.Logf("driver CUDA version %d", v)
}

func TestDevice(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	var in Info
	if err := d.Do(func() error { in, err = d.Info(); return err }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", in)
	if in.SMs <= 0 || in.Memory <= 0 || in.Name == "" {
		t.Errorf("implausible device info %+v", in)
	}
	sentinel := errors.New("from the device goroutine")
	if err := d.Do(func() error { return sentinel }); err != sentinel {
		t.Errorf("Do returned %v", err)
	}
	if err := d.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Do(panic) returned %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(func() error { return nil }); err != ErrClosed {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	if _, err := Open(1 << 20); err == nil {
		t.Error("Open(huge ordinal) succeeded")
	}
}

func TestEncodeTiled2DErrors(t *testing.T) {
	ok := Tile2D{Addr: 0x10000, Rows: 300, Cols: 2560, Stride: 5120, BoxRows: 128, BoxCols: 64, Swizzle128: true}
	cases := []struct {
		field string
		edit  func(*Tile2D)
	}{
		{"Addr", func(t *Tile2D) { t.Addr = 0x10008 }},
		{"Rows, Cols", func(t *Tile2D) { t.Rows = 0 }},
		{"Stride", func(t *Tile2D) { t.Stride = 5128 }},
		{"Stride", func(t *Tile2D) { t.Stride = 4096 }},
		{"BoxRows, BoxCols", func(t *Tile2D) { t.BoxRows = 257 }},
		{"BoxRows, BoxCols", func(t *Tile2D) { t.BoxCols = 4 }},
		{"BoxCols", func(t *Tile2D) { t.BoxCols = 128 }},
		{"BoxCols", func(t *Tile2D) { t.Bytes, t.BoxCols = true, 256 }},
		{"BoxRows, BoxCols", func(t *Tile2D) { t.Bytes, t.BoxCols = true, 8 }},
		{"Stride", func(t *Tile2D) { t.Bytes, t.Stride = true, 2544 }},
	}
	okBytes := Tile2D{Addr: 0x10000, Rows: 300, Cols: 2560, Stride: 2560, BoxRows: 128, BoxCols: 128, Swizzle128: true, Bytes: true}
	if _, err := EncodeTiled2D(okBytes); err != nil {
		var e *TensorMapError
		if errors.As(err, &e) {
			t.Errorf("%+v: %v", okBytes, err)
		}
	}
	for _, c := range cases {
		d := ok
		c.edit(&d)
		_, err := EncodeTiled2D(d)
		var e *TensorMapError
		if !errors.As(err, &e) || e.Field != c.field {
			t.Errorf("%+v: error %v, want a TensorMapError on %s", d, err, c.field)
		}
	}
}

// TestDoNested checks that Do inside Do runs at once on the owning thread (no deadlock, no hand-over), that a
// panic there comes back from the outermost Do, and that other goroutines still wait their turn meanwhile.
func TestDoNested(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.OnOwner() {
		t.Fatal("OnOwner true on the test goroutine")
	}
	before := d.Stats()
	var owner, nestedOwner bool
	var inner Info
	started := make(chan struct{})
	other := make(chan error, 1)
	go func() {
		<-started
		other <- d.Do(func() error { return nil })
	}()
	err = d.Do(func() error {
		owner = d.OnOwner()
		close(started)
		for i := 0; i < 100; i++ {
			if err := d.Do(func() error {
				nestedOwner = d.OnOwner()
				var err error
				inner, err = d.Info() // driver calls work: the context is current here
				return err
			}); err != nil {
				return err
			}
		}
		select {
		case err := <-other:
			return fmt.Errorf("another goroutine's Do ran during this one: %v", err)
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other goroutine's Do: %v", err)
	}
	if !owner || !nestedOwner {
		t.Errorf("OnOwner inside Do = %v, nested = %v; want true", owner, nestedOwner)
	}
	if inner.SMs <= 0 {
		t.Errorf("nested Info = %+v", inner)
	}
	got := d.Stats()
	if hops, inl := got.Hops-before.Hops, got.Inline-before.Inline; hops != 2 || inl != 100 {
		t.Errorf("Stats: %d hops and %d inline calls, want 2 and 100", hops, inl)
	}
	err = d.Do(func() error { return d.Do(func() error { panic("nested boom") }) })
	if err == nil || !strings.Contains(err.Error(), "nested boom") {
		t.Errorf("nested panic returned %v", err)
	}
	if err := d.Do(func() error { return nil }); err != nil {
		t.Errorf("Do after a nested panic: %v", err)
	}
}

// BenchmarkDo times one hand-over to the owning goroutine (Hop) and one nested call on it (Inline).
func BenchmarkDo(b *testing.B) {
	d, err := Open(0)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	nop := func() error { return nil }
	b.Run("Hop", func(b *testing.B) {
		t0 := time.Now()
		for range b.N {
			d.Do(nop)
		}
		ns := float64(time.Since(t0).Nanoseconds()) / float64(b.N)
		fmt.Printf("KEVBENCH do hop ns=%.0f\n", ns)
	})
	b.Run("Inline", func(b *testing.B) {
		var el time.Duration
		d.Do(func() error {
			t0 := time.Now()
			for range b.N {
				d.Do(nop)
			}
			el = time.Since(t0)
			return nil
		})
		n := b.N
		fmt.Printf("KEVBENCH do inline ns=%.1f\n", float64(el.Nanoseconds())/float64(n))
	})
}

// TestHardeningDeviceClose races Do calls that make a driver call against Close: each returns nil (it ran, with
// the context current) or ErrClosed (it did not run); Close inside Do is refused instead of deadlocking, and a
// second Close does nothing.
func TestHardeningDeviceClose(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Do(func() error {
		if err := d.Close(); err == nil {
			return errors.New("Close inside Do succeeded")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ran, closed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				err := d.Do(func() error { _, err := d.Info(); return err })
				switch err {
				case nil:
					ran.Add(1)
				case ErrClosed:
					closed.Add(1)
				default:
					t.Errorf("Do: %v", err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ran.Load()+closed.Load() != 8*200 {
		t.Fatalf("%d ran, %d refused", ran.Load(), closed.Load())
	}
	t.Logf("%d calls ran before Close, %d were refused", ran.Load(), closed.Load())
}
