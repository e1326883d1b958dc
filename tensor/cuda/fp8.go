//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/internal/fp8"
	"github.com/kevgo/kev/tensor"
)

// FP8 weights (tensor.F8E4M3): a weight matrix [N, K] quantized on the host by internal/fp8.QuantizeRows, held in
// one buffer: the N·K codes row-major, then, from the next multiple of 16 bytes, the N float32 row scales. A product
// with one quantizes x per row on the device (quant_rows_e4m3, kernels/fp8_sm90a.cu) and runs the FP8 wgmma GEMM,
// which scales each fp32 sum by its row's and column's scales. Hopper only for now (the kernels are built for
// sm_90a); compute capability 8.9 has FP8 tensor cores too but no kernels here yet.

// fp8ScaleOff is the byte offset of the row scales in an F8E4M3 tensor of n·k codes.
func fp8ScaleOff(n, k int) int64 { return (int64(n)*int64(k) + 15) &^ 15 }

// fp8Scales returns the row scales of F8E4M3 tensor t [N, K].
func fp8Scales(t *Tensor) Buffer {
	off := fp8ScaleOff(t.shape[0], t.shape[1])
	return Buffer{Ptr: t.buf.Ptr + cu.DevicePtr(off), Bytes: t.buf.Bytes - off}
}

// FP8Supported reports whether the device computes with F8E4M3 weights, and if not, why.
func (d *Device) FP8Supported() (bool, string) {
	switch {
	case d.hopper():
		return true, ""
	case d.info.Major > 8 || (d.info.Major == 8 && d.info.Minor >= 9):
		return false, fmt.Sprintf("%s (compute capability %d.%d) has FP8 tensor cores, but the FP8 kernels are built for 9.0 (Hopper) only so far",
			d.info.Name, d.info.Major, d.info.Minor)
	}
	return false, fmt.Sprintf("%s has compute capability %d.%d: FP8 matrix products need an NVIDIA GPU of compute capability 9.0 (Hopper)",
		d.info.Name, d.info.Major, d.info.Minor)
}

// CheckFP8 returns nil on a GPU where the FP8 kernels run (compute capability 9.0), and otherwise a
// *tensor.DTypeError saying why (tensor.FP8).
func (b *Backend) CheckFP8() error {
	if ok, why := b.dev.FP8Supported(); !ok {
		return &tensor.DTypeError{Backend: Name, DType: tensor.F8E4M3, Reason: why}
	}
	return nil
}

// FromFloat32FP8 quantizes a float32 weight matrix [N, K] to E4M3 with one scale per row on the host
// (internal/fp8.QuantizeRowsParallel: QuantizeRows' bits, the rows split among GOMAXPROCS goroutines) and uploads
// the codes and scales as an F8E4M3 tensor (tensor.FP8). K must be a multiple of 16 (the row stride of the GEMM's
// tensor maps, in bytes) and N of 8: another shape is a *tensor.ShapeError. On a GPU without the FP8 kernels it
// returns a *tensor.DTypeError saying why; a NaN or infinite weight is an *fp8.NonFiniteError.
func (b *Backend) FromFloat32FP8(shape []int, data []float32) (tensor.Tensor, error) {
	const op = "FromFloat32FP8"
	if err := b.CheckFP8(); err != nil {
		return nil, err
	}
	if len(shape) != 2 || shape[0] < 0 || shape[1] < 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "shape", Shape: shape, Want: "[N, K]"}
	}
	n, k := shape[0], shape[1]
	if n%8 != 0 || k%16 != 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "shape", Shape: shape, Want: "[N, K] with N a multiple of 8 and K of 16"}
	}
	q, s, err := fp8.QuantizeRowsParallel(data, n, k, 0)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	return b.uploadFP8(shape, q, s)
}

// uploadFP8 uploads codes q [N, K] and scales s [N] into one new F8E4M3 tensor.
func (b *Backend) uploadFP8(shape []int, q []uint8, s []float32) (tensor.Tensor, error) {
	shape = append([]int(nil), shape...)
	n, k := shape[0], shape[1]
	off := fp8ScaleOff(n, k)
	t := &Tensor{shape: shape, dtype: tensor.F8E4M3, b: b}
	if n == 0 || k == 0 {
		return t, nil // no storage, as for other empty tensors
	}
	err := b.run(func(sc *scope) error {
		var err error
		if t.buf, err = sc.alloc(off + 4*int64(n)); err != nil {
			return err
		}
		sc.outs = append(sc.outs, t)
		if err := sc.q.Upload(t.buf, q); err != nil {
			return err
		}
		if err := sc.q.Upload(fp8Scales(t), unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*n)); err != nil {
			return err
		}
		b.fp8 = true // an FP8 weight (Backend.fp8)
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.loaded = true
	return t, nil
}

// toHostFP8 copies F8E4M3 tensor c back as its dequantized values (codes times row scales, internal/fp8.Dequantize).
func (b *Backend) toHostFP8(c *Tensor) ([]float32, error) {
	n, k := c.shape[0], c.shape[1]
	if n == 0 || k == 0 {
		return make([]float32, n*k), nil
	}
	q := make([]uint8, n*k)
	s := make([]float32, n)
	if err := b.run(func(sc *scope) error {
		if err := sc.q.Download(q, c.buf); err != nil {
			return err
		}
		return sc.q.Download(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*n), fp8Scales(c))
	}); err != nil {
		return nil, err
	}
	return fp8.Dequantize(q, s, n, k)
}

// matmulFP8 is MatMul with an F8E4M3 weight: x's FP8 codes (attached by its producer, fp8_fuse.go, or x (BF16 or
// F32) quantized per row into temporaries), then the FP8 GEMM;
// y is BF16 for a BF16 x, F32 for an F32 one. With swiglu (BF16 x, w [2F, K] with F a multiple of 8) y is
// SwiGLU of that product, [M, F], from the GEMM's epilogue: MatMulSwiGLU's bits.
func (b *Backend) matmulFP8(xt, wt *Tensor, swiglu bool) (tensor.Tensor, error) {
	op := "MatMul"
	if swiglu {
		op = "MatMulSwiGLU"
	}
	m, k, n := xt.shape[0], xt.shape[1], wt.shape[0]
	if xt.dtype != tensor.BF16 && xt.dtype != tensor.F32 {
		return nil, &tensor.DTypeError{Backend: Name, DType: xt.dtype, Reason: "a product with an F8E4M3 weight takes a BF16 or F32 x"}
	}
	nOut := n
	if swiglu {
		nOut = n / 2
	}
	var y *Tensor
	err := b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), m, nOut); err != nil || m == 0 || nOut == 0 {
			return err
		}
		if k == 0 { // y is [m, nOut]: with swiglu, silu(0)·0 = 0
			return s.q.Memset16(y.buf, 0, int64(m*nOut)*elemSize(y.dtype)/2)
		}
		xq, xs, err := s.fp8X(xt) // the codes x's producer attached, or x quantized now
		if err != nil {
			return err
		}
		return s.q.GEMMFP8(GEMMFP8{Y: y.buf, X: xq, XS: xs, W: wt.buf, WS: fp8Scales(wt), M: m, N: n, K: k,
			F32Out: y.dtype == tensor.F32, SwiGLU: swiglu, WLoaded: wt.loaded})
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	return y, nil
}

// QuantRowsE4M3 enqueues quant_rows_e4m3: for each of the M rows of x (BF16 or F32, [M, K] with row stride ldx
// elements, a multiple of 8), its scale s[r] = max|x[r, ·]| / 448 (1 when that is 0) and its codes q[r·K …] =
// E4M3(x / s[r]), nearest even, saturating: internal/fp8.QuantizeActivations, bit for bit. K a multiple of 16.
func (q *Queue) QuantRowsE4M3(qb, s Buffer, x Operand, M, K, ldx int) error {
	const op = "QuantRowsE4M3"
	if M <= 0 || K <= 0 || K%16 != 0 {
		return &ArgError{op, "M, K", fmt.Sprintf("%d, %d must be positive, K a multiple of 16", M, K)}
	}
	if ldx < K || ldx%8 != 0 {
		return &ArgError{op, "ldx", fmt.Sprintf("%d must be ≥ K = %d and a multiple of 8", ldx, K)}
	}
	if x.DType != tensor.BF16 && x.DType != tensor.F32 {
		return &ArgError{op, "x", fmt.Sprintf("storage type %v, want BF16 or F32", x.DType)}
	}
	if err := need(op, "x", x.Buffer, elemSize(x.DType)*(int64(M-1)*int64(ldx)+int64(K))); err != nil {
		return err
	}
	if err := q.needCodes(op, qb, s, M, K); err != nil {
		return err
	}
	xF32 := int32(0)
	if x.DType == tensor.F32 {
		xF32 = 1
	}
	q.args.Reset()
	q.args.Ptr(x.Ptr).I32(xF32).I32(int32(ldx)).Ptr(qb.Ptr).Ptr(s.Ptr).I32(int32(M)).I32(int32(K))
	return q.launch("fp8_sm90a", "quant_rows_e4m3", cudrv.Dim3{X: M, Y: 1, Z: 1}, cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// needCodes checks, for op, the E4M3 codes qb of an [m, k] matrix (m·k bytes) and its row scales s (m floats), and
// that the device runs the FP8 kernels.
func (q *Queue) needCodes(op string, qb, s Buffer, m, k int) error {
	if err := need(op, "q", qb, int64(m)*int64(k)); err != nil {
		return err
	}
	if err := need(op, "s", s, 4*int64(m)); err != nil {
		return err
	}
	if !q.d.hopper() {
		return &ArgError{op, "device", "the FP8 kernels need compute capability 9.0"}
	}
	return nil
}

// GEMMFP8 describes Y[M,N] = (X[M,K] · W[N,K]ᵀ) · XS[row] · WS[col] (+ R[M,N]) with E4M3 X and W (row-major,
// K contiguous, rows K bytes apart), fp32 scales, fp32 accumulation and bf16 (or fp32) Y.
type GEMMFP8 struct {
	Y  Buffer // output, bf16 (fp32 when F32Out), row stride LdY
	X  Buffer // E4M3 codes [M, K] (QuantRowsE4M3)
	XS Buffer // fp32 [M]: X's row scales
	W  Buffer // E4M3 codes [N, K]
	WS Buffer // fp32 [N]: W's row scales
	R  Buffer // optional residual, the type and stride of Y; may be Y itself

	M, N, K int // K a multiple of 16, N of 8
	LdY     int // elements between Y (and R) rows; 0 means N
	F32Out  bool
	// WLoaded: W holds data uploaded from the host that no kernel writes, so the kernel may load its first W
	// tiles before waiting for the kernel before it (as GEMM.WLoaded).
	WLoaded bool

	// SwiGLU: W = [Wg; Wu] (N = 2F rows, F a multiple of 8) and Y bf16 [M, F] (LdY ≥ F; 0 means F) =
	// silu(X·Wgᵀ)·(X·Wuᵀ): the bits of SwiGLU on the bf16 output of the plain product. No residual or fp32 output.
	SwiGLU bool

	bn int // 0: planned (fp8Plan); else one of fp8Widths (fp8GatedWidths with SwiGLU; tests, benchmarks)
	mc int // 0: planned (fp8Cluster); 1: the cluster kernels; -1: the single-block kernels (tests, benchmarks)
	// xc: 0 as the device says (KEV_CUDA_FP8_XC) where fp8XCluster holds; 1 the X-sharing cluster kernels (an error
	// with mc, persist or half, or a FAST width); -1 not (tests, benchmarks)
	xc int
	// persist: 0 planned (fp8Persistent); 1 the persistent kernels; -1 one tile a block (tests, benchmarks). With mc,
	// the persistent cluster kernels.
	persist int
	// half: 0 as the device says (KEV_CUDA_FP8_HALF) where the product has a half-column kernel (fp8Half); 1 that
	// kernel (an error where there is none); -1 the whole tiles (tests, benchmarks)
	half int
	// promo: 0 as the device says (KEV_CUDA_FP8_PROMOTE, all of K by default); else the k tiles whose products the
	// tensor cores sum before each fp32 add, 1 … fp8PromoMax (tests, benchmarks). Unlike the forms above it moves the
	// results' low bits; every kernel gives the same bits at the same interval.
	promo int
	// pipe: 0 as the device says (KEV_CUDA_FP8_PIPE); 1 the k loop that keeps one k tile's products in flight when
	// the tensor cores sum all of K; -1 the loop that waits for every k tile's products (tests, benchmarks). The
	// same bits either way.
	pipe int
}

// fp8Knobs returns the device's FP8 settings and multiprocessors, for planFP8.
func (d *Device) fp8Knobs() fp8Knobs {
	return fp8Knobs{sms: d.sms(), promo: d.fp8Promo, wide: d.fp8Wide, mc: d.fp8MC, xc: d.fp8XC, persist: d.fp8Persist,
		half: d.fp8Half, pipe: d.fp8Pipe}
}

// GEMMFP8 enqueues g on the FP8 kernel planFP8 picks for it (128-row tiles, their width planned by fp8Plan).
func (q *Queue) GEMMFP8(g GEMMFP8) error {
	const op = "GEMMFP8"
	if g.M <= 0 || g.N <= 0 || g.K <= 0 || g.N%8 != 0 || g.K%16 != 0 {
		return &ArgError{op, "M, N, K", fmt.Sprintf("%d, %d, %d must be positive, N a multiple of 8 and K of 16", g.M, g.N, g.K)}
	}
	nOut := g.N // Y's columns
	if g.SwiGLU {
		if g.N%16 != 0 || g.R.Ptr != 0 || g.F32Out {
			return &ArgError{op, "SwiGLU", fmt.Sprintf("N = %d must be a multiple of 16, with no residual and bf16 Y", g.N)}
		}
		nOut = g.N / 2
	}
	if g.LdY == 0 {
		g.LdY = nOut
	}
	if g.LdY < nOut || g.LdY%2 != 0 {
		return &ArgError{op, "LdY", fmt.Sprintf("%d must be ≥ %d (Y's columns) and even", g.LdY, nOut)}
	}
	ysz := int64(2)
	if g.F32Out {
		ysz = 4
	}
	ybytes := ysz * (int64(g.M-1)*int64(g.LdY) + int64(nOut))
	for _, c := range []struct {
		name string
		b    Buffer
		n    int64
	}{{"X", g.X, int64(g.M) * int64(g.K)}, {"XS", g.XS, 4 * int64(g.M)}, {"W", g.W, int64(g.N) * int64(g.K)},
		{"WS", g.WS, 4 * int64(g.N)}, {"Y", g.Y, ybytes}} {
		if err := need(op, c.name, c.b, c.n); err != nil {
			return err
		}
	}
	if g.R.Ptr != 0 {
		if err := need(op, "R", g.R, ybytes); err != nil {
			return err
		}
	}
	d := q.d
	if !d.hopper() {
		return &ArgError{op, "device", "the FP8 kernels need compute capability 9.0"}
	}
	l, ferr := planFP8(fp8Form{M: g.M, N: g.N, K: g.K, swiglu: g.SwiGLU, bn: g.bn, mc: g.mc, xc: g.xc,
		persist: g.persist, half: g.half, promo: g.promo, pipe: g.pipe}, d.fp8Knobs())
	if ferr != nil {
		return &ArgError{op, ferr.arg, ferr.reason}
	}
	tmX, err := d.tensorMap(cudrv.Tile2D{Addr: g.X.Ptr, Rows: g.M, Cols: g.K, Stride: g.K, BoxRows: l.boxX, BoxCols: 128,
		Swizzle128: true, Bytes: true})
	if err != nil {
		return fmt.Errorf("cuda: %s: X: %w", op, err)
	}
	tmW, err := d.tensorMap(cudrv.Tile2D{Addr: g.W.Ptr, Rows: g.N, Cols: g.K, Stride: g.K, BoxRows: l.boxW, BoxCols: 128,
		Swizzle128: true, Bytes: true})
	if err != nil {
		return fmt.Errorf("cuda: %s: W: %w", op, err)
	}
	yF32, wpre := int32(0), int32(0)
	if g.F32Out {
		yF32 = 1
	}
	if g.WLoaded {
		wpre = 1
	}
	a := &q.args
	a.Reset()
	a.Bytes(tmX[:], 64).Bytes(tmW[:], 64).Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(g.XS.Ptr).Ptr(g.WS.Ptr).
		I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdY)).I32(yF32).I32(l.gn).I32(wpre).I32(l.flags)
	grid := cudrv.Dim3{X: l.gridX, Y: l.gridY, Z: 1}
	if l.clusterPersist { // clusters of two, each taking pairs of row tiles: no more clusters than run at once
		n, err := d.maxClusters("fp8_sm90a", l.fn, 384, l.shared)
		if err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		grid = cudrv.Dim3{X: 2 * min((l.mT+1)/2*l.nT, n), Y: 1, Z: 1}
	}
	if d.tagLaunches() {
		q.tag = fmt.Sprintf(" N=%d K=%d M=%d", g.N, g.K, g.M)
		defer func() { q.tag = "" }()
	}
	return q.launch("fp8_sm90a", l.fn, grid, cudrv.Dim3{X: 384, Y: 1, Z: 1}, l.shared)
}
