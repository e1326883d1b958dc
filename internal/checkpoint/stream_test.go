package checkpoint

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
)

// TestStreamMatchesOpen fetches every tensor of each golden checkpoint from OpenStream, in load order, in a random
// order and from several goroutines, with budgets from one byte to the default, and compares each with Open's, bit
// for bit; BF16 tensors that no adapter touches must point into the file.
func TestStreamMatchesOpen(t *testing.T) {
	for _, fx := range goldenFixtures {
		dir := goldenDir(t, fx)
		kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
		for _, dt := range []qwen35.DType{qwen35.F32, qwen35.BF16} {
			want, err := Open(kev, base, Options{DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name    string
				budget  int64
				workers int
				order   string
			}{
				{"load-order", 0, 0, "load"}, {"budget-1", 1, 3, "load"}, {"shuffled", 4096, 2, "random"},
				{"concurrent", 0, 4, "concurrent"},
			} {
				t.Run(fx+"/"+dt.String()+"/"+tc.name, func(t *testing.T) {
					var mu sync.Mutex
					var last, total int64
					ck, err := OpenStream(kev, base, StreamOptions{Options: Options{DType: dt, Workers: tc.workers},
						Budget: tc.budget, Progress: func(done, all int64) {
							mu.Lock()
							defer mu.Unlock()
							if done < last {
								t.Errorf("progress went back from %d to %d", last, done)
							}
							last, total = done, all
						}})
					if err != nil {
						t.Fatal(err)
					}
					defer ck.Close()
					names := streamOrder(&ck.Weights.Config, ExpectedShapes(&ck.Weights.Config))
					if len(names) != len(want.Weights.Tensors) {
						t.Fatalf("stream order has %d names, Open built %d tensors", len(names), len(want.Weights.Tensors))
					}
					check := func(name string) {
						w := want.Weights.Tensors[name]
						got, err := ck.Weights.Lookup(name, w.Shape...)
						if err != nil {
							t.Error(err)
							return
						}
						if got.DType != w.DType || !reflect.DeepEqual(got.F32, w.F32) || !reflect.DeepEqual(got.BF16, w.BF16) {
							t.Errorf("%s: streamed tensor differs from Open's", name)
						}
						merged := ck.Adapter != nil && want.Adapter != nil && isAdapted(ck, name)
						if wantMapped := dt == qwen35.BF16 && w.DType == qwen35.BF16 && !merged; got.Mapped != wantMapped {
							t.Errorf("%s: Mapped %v, want %v", name, got.Mapped, wantMapped)
						}
						ck.Weights.Release(name)
					}
					switch tc.order {
					case "load":
						for _, n := range names {
							check(n)
						}
					case "random":
						rng := rand.New(rand.NewPCG(7, uint64(len(names))))
						rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
						for _, n := range names {
							check(n)
						}
					case "concurrent":
						var wg sync.WaitGroup
						for g := range 3 {
							wg.Go(func() {
								for i := g; i < len(names); i += 3 {
									check(names[i])
								}
							})
						}
						wg.Wait()
					}
					mu.Lock()
					defer mu.Unlock()
					if last != total || total == 0 {
						t.Errorf("progress ended at %d of %d", last, total)
					}
				})
			}
		}
	}
}

// isAdapted reports whether the streaming checkpoint merges an adapter into name.
func isAdapted(ck *Checkpoint, name string) bool {
	return ck.Weights.Source.(*stream).items[name].pair != nil
}

// TestStreamClose checks that Fetch after Close fails and that Close twice is harmless.
func TestStreamClose(t *testing.T) {
	dir := goldenDir(t, goldenFixtures[0])
	ck, err := OpenStream(filepath.Join(dir, "kev"), filepath.Join(dir, "base"), StreamOptions{Options: Options{DType: qwen35.BF16}, Budget: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := ck.Weights
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Lookup("norm.weight", w.Config.HiddenSize); err == nil {
		t.Error("Lookup after Close: no error")
	}
}
