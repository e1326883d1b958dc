//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// kPartition describes how a plan reduces each output element over k: the kernel family (the wgmma kernels wg128,
// wg256, sk, the other tiles and the chunked tiles give the same bits for the same k ranges, whatever their tile
// width) and the k tiles per
// independently summed range (split or chunk; all of them when neither).
type kPartition struct {
	family string
	tiles  int
}

func partitionOf(p gemmPlan, K int) kPartition {
	kTiles := (K + p.bk - 1) / p.bk
	r := kTiles
	switch {
	case p.splits > 1:
		r = p.tps
	case p.chunk > 0:
		r = p.chunk
	}
	family := p.kern.String()
	if p.kern == gemmWG128 || p.kern == gemmWG256 || p.kern == gemmSK || p.kern == gemmWGX || p.kern == gemmWGC {
		family = "wgmma"
	}
	return kPartition{family, r}
}

// TestGEMMPlanInvariant checks that the default plan reduces every output element the same way for every M, on a
// Hopper-like and an Ampere-like device, and never takes the streaming kernel.
func TestGEMMPlanInvariant(t *testing.T) {
	shapes := append([][2]int{{264, 4096}, {392, 1000}, {512, 2048}, {1024, 512}, {8, 8}}, gemmShapes...)
	for _, major := range []int{9, 8} {
		d := &Device{}
		d.info.Major, d.info.SMs = major, 132
		for _, s := range shapes {
			N, K := s[0], s[1]
			var first kPartition
			for M := 1; M <= 20000; M += 1 + M/7 {
				p := d.plan(&GEMM{M: M, N: N, K: K})
				if p.kern == gemmStream {
					t.Fatalf("sm %d N=%d K=%d M=%d: streaming kernel planned", major, N, K, M)
				}
				kTiles := (K + p.bk - 1) / p.bk
				if p.kern == gemmSK { // tps is the chunk: the chunks must cover k exactly
					if n := (kTiles + p.tps - 1) / p.tps; p.splits != 1 || p.tps < 1 || (n-1)*p.tps >= kTiles {
						t.Errorf("sm %d N=%d K=%d M=%d: stream-K plan %d splits, chunks of %d tiles for %d tiles", major, N, K, M, p.splits, p.tps, kTiles)
					}
				} else if p.splits < 1 || (p.splits-1)*p.tps >= kTiles || p.splits*p.tps < kTiles {
					t.Errorf("sm %d N=%d K=%d M=%d: %d splits of %d tiles for %d tiles", major, N, K, M, p.splits, p.tps, kTiles)
				}
				if p.chunk > 0 && (p.splits != 1 || (p.kern != gemmWG128 && p.kern != gemmSK && p.kern != gemmWGC)) {
					t.Errorf("sm %d N=%d K=%d M=%d: chunk %d with %v and %d splits", major, N, K, M, p.chunk, p.kern, p.splits)
				}
				got := partitionOf(p, K)
				if M == 1 {
					first = got
					t.Logf("sm %d N=%d K=%d: %+v", major, N, K, got)
				} else if got != first {
					t.Errorf("sm %d N=%d K=%d: M=%d reduces as %+v, M=1 as %+v", major, N, K, M, got, first)
				}
			}
		}
	}
}

// gemmRows runs Y = X[:M]·Wᵀ (+ R[:M]) with the given GEMM fields and returns Y's bf16 bits.
func gemmRows(t *testing.T, x, w, res []uint16, M, N, K int, g GEMM) []uint16 {
	t.Helper()
	var out []byte
	do(t, func(q *Queue) error {
		X := upload(t, q, bytesOf16(x[:M*K]), 0)
		W := upload(t, q, bytesOf16(w), 0)
		Y := poisoned(t, q, 2*M*N)
		var R Buffer
		if res != nil {
			R = upload(t, q, bytesOf16(res[:M*N]), 0)
			defer q.Free(R)
		}
		defer func() {
			q.Free(X)
			q.Free(W)
			q.Free(Y)
		}()
		g.Y, g.X, g.W, g.R, g.M, g.N, g.K = Y, X, W, R, M, N, K
		if err := q.GEMM(g); err != nil {
			return err
		}
		out = download(t, q, Y, 2*M*N)
		return nil
	})
	return from16(out)
}

// TestGEMMBatchInvariant checks on the device that a row of Y has the same bits whatever M it is computed in (the
// default plan, which changes schedule and tile width with M), that chunked accumulation gives the bits of split-K
// over the same chunks, that the unchunked wgmma kernels (wg128, wg256, sk) agree bit for bit, and logs whether the
// other kernel families do (they are not relied on).
func TestGEMMBatchInvariant(t *testing.T) {
	r := newRand(t)
	shapes := append([][2]int{{264, 4096}, {512, 2048}, {1024, 512}}, gemmShapes...)
	Ms := []int{1, 2, 7, 16, 33, 64, 100, 129, 240, 300, 567, 700, 2392}
	maxM := Ms[len(Ms)-1]
	for _, s := range shapes {
		N, K := s[0], s[1]
		t.Run(fmt.Sprintf("N=%d/K=%d", N, K), func(t *testing.T) {
			x := randBF16(r, maxM*K, 1)
			w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
			res := randBF16(r, maxM*N, 1)
			ref := gemmRows(t, x, w, res, maxM, N, K, GEMM{})
			for _, M := range Ms[:len(Ms)-1] {
				got := gemmRows(t, x, w, res, M, N, K, GEMM{})
				p := dev.plan(&GEMM{M: M, N: N, K: K})
				for i := range got {
					if got[i] != ref[i] {
						t.Errorf("M=%d (%v, %d splits, chunk %d): row %d column %d: %#04x, at M=%d %#04x", M, p.kern, p.splits, p.chunk, i/N, i%N, got[i], maxM, ref[i])
						break
					}
				}
			}
			if !dev.hopper() {
				return
			}
			// Chunked accumulation against split-K over the same chunks, at one M.
			const M = 300
			kTiles := (K + 63) / 64
			for _, c := range []int{4, 7, kTiles / 3} {
				if c < 1 || c >= kTiles {
					continue
				}
				if sp := dev.plan(&GEMM{M: M, N: N, K: K, kern: gemmWG128, splits: (kTiles + c - 1) / c}); sp.tps != c {
					continue // that split count partitions differently
				}
				split := gemmRows(t, x, w, res, M, N, K, GEMM{kern: gemmWG128, splits: (kTiles + c - 1) / c})
				chunked := gemmRows(t, x, w, res, M, N, K, GEMM{kern: gemmWG128, splits: 1, chunk: c})
				for i := range split {
					if split[i] != chunked[i] {
						t.Errorf("chunk %d: element %d: split-K %#04x, chunked %#04x", c, i, split[i], chunked[i])
						break
					}
				}
			}
			// Unchunked, the wgmma kernels must agree whatever their tile width or schedule (planFixed picks among
			// them by M); the other families are logged for later planners.
			for _, m := range []int{16, 300} {
				base := gemmRows(t, x, w, nil, m, N, K, GEMM{kern: gemmWG128, splits: 1})
				for _, g := range []GEMM{{kern: gemmWG256, splits: 1}, {kern: gemmSK, sk: -1, chunk: kTiles}, {kern: gemmStream, splits: 1}, {tile: 64, splits: 1}, {tile: 128, splits: 1}} {
					if g.kern == gemmStream && m > streamMaxM {
						continue
					}
					other := gemmRows(t, x, w, nil, m, N, K, g)
					diff := 0
					for i := range base {
						if base[i] != other[i] {
							diff++
						}
					}
					if g.kern == gemmWG256 || g.kern == gemmSK {
						if diff > 0 {
							t.Errorf("M=%d, one split: %v differs from wg128 in %d of %d outputs", m, g.kern, diff, len(base))
						}
						continue
					}
					t.Logf("M=%d, one split: %v tile %d differs from wg128 in %d of %d outputs", m, g.kern, g.tile, diff, len(base))
				}
			}
		})
	}
}

// TestGEMMTiles checks every wgmma tile kernel (wgTiles), persistent and in waves, bit for bit against the 128×128
// one (waves, wgmma groups waited for one at a time, tested since the first Hopper planner): with one split, and
// with the k tiles in splits (split-K, partials added in split order by gemm_splitk_reduce against the 128×128
// kernel's in-kernel finish), at M that leave consumers without rows or end inside a tile (of 128 or 192 rows),
// and N that are not multiples of the tile width, with a residual.
func TestGEMMTiles(t *testing.T) {
	if !dev.hopper() {
		t.Skip("wgmma kernels need compute capability 9.0")
	}
	r := newRand(t)
	for _, s := range [][2]int{{264, 4096}, {392, 1000}, {2560, 9216}, {12352, 2560}} {
		N, K := s[0], s[1]
		const maxM = 400
		x := randBF16(r, maxM*K, 1)
		w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
		res := randBF16(r, maxM*N, 1)
		kTiles := (K + 63) / 64
		for _, M := range []int{16, 100, 240, 300, 400} {
			for _, sp := range []int{1, 3} {
				if sp > 1 && (kTiles+sp-1)/sp*(sp-1) >= kTiles {
					continue
				}
				base := gemmRows(t, x, w, res, M, N, K, GEMM{kern: gemmWG128, splits: sp})
				for _, xt := range wgTiles {
					for _, waves := range []bool{false, true} {
						if waves && sp > 1 {
							continue
						}
						for _, gn := range []int{0, 1, 3, -1} { // tile order: the planned one, m-fastest, groups of 3 n-tiles, rotated
							// gn 1: W also marked as uploaded weights (its first tiles before the grid wait); gn −1 on 6
							// blocks, so that the rotation by rounds moves tiles
							grid := 0
							if gn < 0 {
								grid = 6
							}
							got := gemmRows(t, x, w, res, M, N, K, GEMM{xt: xt, splits: sp, waves: waves, gn: gn, grid: grid, WLoaded: gn == 1})
							for i := range base {
								if got[i] != base[i] {
									t.Errorf("N=%d K=%d M=%d %d splits: %dx%d (waves %v, gn %d): row %d column %d: %#04x, 128×128 %#04x", N, K, M, sp, xt.bm, xt.bn, waves, gn, i/N, i%N, got[i], base[i])
									break
								}
							}
						}
					}
				}
			}
		}
	}
}

// invariantConfigs are two random models whose shapes reach every planner choice: the aligned test model, and a
// wider one (d = 512, head dimension 128, d_k = 128) whose GEMMs run split-K at small M and chunked at large M.
func invariantConfigs() map[string]qwen35.Config {
	lin, full := qwen35.LinearAttention, qwen35.FullAttention
	cs := map[string]qwen35.Config{"aligned": modelConfigs()["aligned"]}
	cs["wide"] = qwen35.Config{HiddenSize: 512, NumLayers: 4, IntermediateSize: 2048, VocabSize: 320, RMSNormEps: 1e-6,
		LayerTypes: []qwen35.LayerType{lin, full, lin, full},
		NumHeads:   8, NumKVHeads: 2, HeadDim: 128, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
		LinearNumKeyHeads: 2, LinearNumValueHeads: 4, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernel: 4}
	return cs
}

// invRequest is a state's tokens and the question rows continuing it.
type invRequest struct {
	text []int32
	rows [][]int32
}

// hiddenRows returns the final hidden states of each row of bt, as fp32 (bf16 values widened exactly).
func hiddenRows(t *testing.T, b tensor.Backend, m *layers.Model, bt *layers.Batch, d int) ([][]float32, []*layers.State) {
	t.Helper()
	out, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	parts := make([][]float32, len(out.Hidden))
	for i, h := range out.Hidden {
		if parts[i], err = b.ToHost(h); err != nil {
			t.Fatal(err)
		}
	}
	rows := make([][]float32, len(bt.Rows))
	for r, at := range out.At {
		rows[r] = parts[at.Part][at.Off*d : (at.Off+len(bt.Rows[r].IDs))*d]
	}
	return rows, out.States
}

// TestForwardBatchInvariant runs random requests through Model.Forward alone (a new state and its rows) and inside
// batches of 2, 7 and 33 mixed requests — new states, states kept by an earlier batch, duplicates sharing one new
// state —, and requires every row's final hidden states to be bit-identical. Texts reach 1,100 tokens so rows see
// prefixes long enough for the attention key splits, and the batches reach ~20,000 tokens.
func TestForwardBatchInvariant(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	for name, c := range invariantConfigs() {
		t.Run(name, func(t *testing.T) {
			m, err := layers.New(gb, modelWeights(r, c))
			if err != nil {
				t.Fatal(err)
			}
			lens := []int{3, 40, 100, 300, 600, 1100}
			reqs := make([]invRequest, 12)
			for i := range reqs {
				reqs[i].text = randomIDs(r, lens[i%len(lens)], c.VocabSize)
				for range 1 + r.IntN(3) {
					reqs[i].rows = append(reqs[i].rows, randomIDs(r, 1+r.IntN(40), c.VocabSize))
				}
			}
			alone := make([][][]float32, len(reqs))
			for i, q := range reqs {
				bt := &layers.Batch{New: []layers.NewState{{IDs: q.text}}}
				for _, row := range q.rows {
					bt.Rows = append(bt.Rows, layers.Row{IDs: row})
				}
				alone[i], _ = hiddenRows(t, gb, m, bt, c.HiddenSize)
			}
			// States kept by one batch of several new states, for the cached requests below.
			cached := map[int]*layers.State{}
			keep := &layers.Batch{}
			for i := 0; i < len(reqs); i += 2 {
				keep.New = append(keep.New, layers.NewState{IDs: reqs[i].text, Keep: true})
			}
			_, states := hiddenRows(t, gb, m, keep, c.HiddenSize)
			for j, st := range states {
				cached[2*j] = st
			}
			defer func() {
				for _, st := range cached {
					st.Free()
				}
			}()
			for _, size := range []int{2, 7, 33} {
				bt := &layers.Batch{}
				newIndex := map[int]int{}
				type at struct{ req, row int }
				var where []at
				for k := range size {
					i := r.IntN(len(reqs))
					if k == size-1 && size > 2 {
						i = where[0].req // a duplicate
					}
					st, isCached := cached[i]
					useCache := isCached && r.IntN(2) == 0
					if !useCache {
						if _, ok := newIndex[i]; !ok {
							newIndex[i] = len(bt.New)
							bt.New = append(bt.New, layers.NewState{IDs: reqs[i].text})
						}
					}
					for j, row := range reqs[i].rows {
						if useCache {
							bt.Rows = append(bt.Rows, layers.Row{IDs: row, Cached: st})
						} else {
							bt.Rows = append(bt.Rows, layers.Row{IDs: row, New: newIndex[i]})
						}
						where = append(where, at{i, j})
					}
				}
				got, _ := hiddenRows(t, gb, m, bt, c.HiddenSize)
				for k, w := range where {
					want := alone[w.req][w.row]
					for e := range want {
						if math.Float32bits(got[k][e]) != math.Float32bits(want[e]) {
							t.Errorf("batch of %d requests (%d new states, %d rows): request %d row %d (cached %v): element %d = %g, alone %g",
								size, len(bt.New), len(bt.Rows), w.req, w.row, bt.Rows[k].Cached != nil, e, got[k][e], want[e])
							break
						}
					}
				}
			}
		})
	}
}

// TestGEMMSwiGLU checks the SwiGLU-fused tile kernels bit for bit against the GEMM followed by the SwiGLU kernel:
// the default plan where it fuses (against the default plan's GEMM) and every tile width (against the unchunked
// GEMM: a fused kernel sums all of k in one chunk), persistent with several tiles per block, at output widths F
// that are not multiples of the tile's half width and K not a multiple of 64.
func TestGEMMSwiGLU(t *testing.T) {
	if !dev.hopper() {
		t.Skip("wgmma kernels need compute capability 9.0")
	}
	r := newRand(t)
	for _, s := range [][2]int{{9216, 2560}, {136, 1000}, {1000, 512}} {
		F, K := s[0], s[1]
		N := 2 * F
		const maxM = 700
		x := randBF16(r, maxM*K, 1)
		w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
		for _, M := range []int{1, 89, 240, 700} {
			unfused := func(g GEMM) []uint16 {
				var out []uint16
				do(t, func(q *Queue) error {
					X := upload(t, q, bytesOf16(x[:M*K]), 0)
					W := upload(t, q, bytesOf16(w), 0)
					GU := poisoned(t, q, 2*M*N)
					Y := poisoned(t, q, 2*M*F)
					defer func() { q.Free(X); q.Free(W); q.Free(GU); q.Free(Y) }()
					g.Y, g.X, g.W, g.M, g.N, g.K = GU, X, W, M, N, K
					if err := q.GEMM(g); err != nil {
						return err
					}
					if err := q.SwiGLU(Y, GU, M, F); err != nil {
						return err
					}
					out = from16(download(t, q, Y, 2*M*F))
					return nil
				})
				return out
			}
			planned, whole := unfused(GEMM{}), unfused(GEMM{xt: wgTiles[1], splits: 1})
			for _, xt := range append([]wgTile{{}}, wgTiles...) {
				want := whole
				if xt.bm == 0 {
					want = planned
				}
				name := fmt.Sprintf("F=%d K=%d M=%d tile %dx%d", F, K, M, xt.bm, xt.bn)
				var got []uint16
				do(t, func(q *Queue) error {
					X := upload(t, q, bytesOf16(x[:M*K]), 0)
					W := upload(t, q, bytesOf16(w), 0)
					Y := poisoned(t, q, 2*M*F)
					defer func() { q.Free(X); q.Free(W); q.Free(Y) }()
					g := GEMM{Y: Y, X: X, W: W, M: M, N: N, K: K, SwiGLU: true, xt: xt}
					if xt.bm != 0 {
						g.gn = 3 // a tile order other than the planned one's
					}
					if xt.bm == 0 && !q.d.SwiGLUFused(M, N, K) {
						return nil // the default plan has no fused kernel here: the backend runs the two kernels
					}
					if err := q.GEMM(g); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					got = from16(download(t, q, Y, 2*M*F))
					return nil
				})
				if got == nil {
					continue
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("%s: row %d column %d: fused %#04x, GEMM then SwiGLU %#04x", name, i/F, i%F, got[i], want[i])
						break
					}
				}
			}
		}
	}
	// Plans without a fused kernel are refused, not run wrong.
	do(t, func(q *Queue) error {
		X := upload(t, q, bytesOf16(randBF16(r, 4*256, 1)), 0)
		W := upload(t, q, bytesOf16(randBF16(r, 32*256, 1)), 0)
		Y := poisoned(t, q, 2*4*16)
		defer func() { q.Free(X); q.Free(W); q.Free(Y) }()
		err := q.GEMM(GEMM{Y: Y, X: X, W: W, M: 4, N: 32, K: 256, SwiGLU: true, xt: wgTiles[1], splits: 2})
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != "SwiGLU" {
			t.Errorf("SwiGLU with a split-K plan: %v, want an ArgError on SwiGLU", err)
		}
		return nil
	})
}

// TestMatMulComputedW checks MatMul with a w that the kernel just before it wrote (w + bias, on the device) against
// the same product with that w uploaded from the host: the same bits. A GEMM that read its first W tiles before
// waiting for the kernel before it would read w before it is written; only uploaded weights may be read early.
func TestMatMulComputedW(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	const M, N, K = 240, 2560, 2560
	up := func(shape []int, v []uint16) tensor.Tensor {
		x, err := gb.FromBits(tensor.BF16, shape, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	x := up([]int{M, K}, randBF16(r, M*K, 1))
	w0 := up([]int{N, K}, randBF16(r, N*K, 1/math.Sqrt(K)))
	bias, err := gb.FromFloat32([]int{K}, func() []float32 {
		v := make([]float32, K)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Free(x, w0, bias)
	product := func(w tensor.Tensor) ([]float32, error) {
		y, err := gb.MatMul(x, w)
		if err != nil {
			return nil, err
		}
		defer gb.Free(y)
		return gb.ToHost(y)
	}
	for i := range 3 {
		var got, want []float32
		err := gb.Run(func() error {
			w, err := gb.AddBias(w0, bias)
			if err != nil {
				return err
			}
			defer gb.Free(w)
			if got, err = product(w); err != nil {
				return err
			}
			wh, err := gb.ToHost(w)
			if err != nil {
				return err
			}
			bits := make([]uint16, len(wh))
			for j, v := range wh {
				bits[j] = half.BF16FromF32(v) // exact: wh holds bf16 values
			}
			wu, err := gb.FromBits(tensor.BF16, []int{N, K}, bits)
			if err != nil {
				return err
			}
			defer gb.Free(wu)
			want, err = product(wu)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("run %d: element %d: %g with the computed w, %g with it uploaded", i, j, got[j], want[j])
			}
		}
	}
}

// TestGEMMRowsPastM checks that the rows past M that the X tensor map reads (xRows) change no bit of Y and that no
// row past M of Y is written: X's buffer holds NaN in the room past row M (tileRoom), and Y's buffer as many rows
// of a poison value; every wgmma schedule (persistent tiles, split-K, chunked tiles, stream-K, the planned one, the
// fused SwiGLU) is compared with the same GEMM on an X buffer that ends at row M, whose map TMA fills with zeros.
func TestGEMMRowsPastM(t *testing.T) {
	if !dev.hopper() {
		t.Skip("wgmma kernels need compute capability 9.0")
	}
	r := newRand(t)
	for _, s := range [][2]int{{2560, 9216}, {12352, 2560}, {392, 1000}} {
		N, K := s[0], s[1]
		const maxM = 300
		x := randBF16(r, maxM*K, 1)
		w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
		kTiles := (K + 63) / 64
		for _, M := range []int{1, 16, 65, 129, 257, 300} {
			if got, want := xRows(&GEMM{M: M, K: K, LdX: K, X: Buffer{Bytes: int64(2 * (M + tileRoom(M)) * K)}}, 192), (M+191)/192*192; got != want {
				t.Errorf("M=%d K=%d: xRows %d for 192-row tiles, want %d", M, K, got, want)
			}
			gs := []GEMM{{}, {SwiGLU: true}, {kern: gemmSK, chunk: max(1, kTiles/3)}}
			for _, xt := range wgTiles {
				gs = append(gs, GEMM{xt: xt}, GEMM{xt: xt, splits: 3, WLoaded: true})
			}
			for _, xc := range wcTiles {
				gs = append(gs, GEMM{xc: xc, chunk: max(1, kTiles/3)})
			}
			for _, g := range gs {
				if g.SwiGLU && !dev.SwiGLUFused(M, N, K) {
					continue
				}
				if g.splits > 1 && (kTiles+g.splits-1)/g.splits*(g.splits-1) >= kTiles {
					continue
				}
				var zero, past []uint16
				var spill bool
				for _, room := range []int{0, tileRoom(M)} {
					outN := N
					if g.SwiGLU {
						outN = N / 2
					}
					var out []uint16
					do(t, func(q *Queue) error {
						X := upload(t, q, bytesOf16(x[:M*K]), 2*room*K) // the room past M: 0xffff, NaN
						W := upload(t, q, bytesOf16(w), 0)
						Y := poisoned(t, q, 2*(M+room)*outN)
						defer func() { q.Free(X); q.Free(W); q.Free(Y) }()
						h := g
						h.Y, h.X, h.W, h.M, h.N, h.K = Y, X, W, M, N, K
						if err := q.GEMM(h); err != nil {
							return err
						}
						out = from16(download(t, q, Y, 2*(M+room)*outN))
						return nil
					})
					for _, v := range out[M*outN:] {
						spill = spill || v != 0xffff
					}
					if room == 0 {
						zero = out
					} else {
						past = out[:M*outN]
					}
				}
				p := dev.plan(&GEMM{M: M, N: N, K: K, SwiGLU: g.SwiGLU, kern: g.kern, chunk: g.chunk, xt: g.xt, xc: g.xc, splits: g.splits})
				if spill {
					t.Errorf("N=%d K=%d M=%d %s (%d splits): Y written past row M", N, K, M, p.fn, p.splits)
				}
				cols := len(zero) / M
				for i := range zero {
					if past[i] != zero[i] {
						t.Errorf("N=%d K=%d M=%d %s (%d splits): row %d column %d: %#04x with NaN rows past M, %#04x with zeros", N, K, M, p.fn, p.splits, i/cols, i%cols, past[i], zero[i])
						break
					}
				}
			}
		}
	}
}
