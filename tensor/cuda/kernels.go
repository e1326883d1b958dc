//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kevgo/kev/internal/cudrv"
)

// ArgError reports a kernel argument that does not fit: a size, a stride, an alignment or a buffer too small.
type ArgError struct {
	Kernel string // e.g. "GEMM"
	Arg    string // e.g. "W"
	Reason string
}

// Error formats the failure as "cuda: Kernel: Arg: Reason".
func (e *ArgError) Error() string { return fmt.Sprintf("cuda: %s: %s: %s", e.Kernel, e.Arg, e.Reason) }

// need checks that b is 16-byte aligned and holds at least n bytes.
func need(kernel, arg string, b Buffer, n int64) error {
	if b.Ptr == 0 {
		return &ArgError{kernel, arg, "nil buffer"}
	}
	if b.Ptr%16 != 0 {
		return &ArgError{kernel, arg, fmt.Sprintf("address %#x is not 16-byte aligned", uintptr(b.Ptr))}
	}
	if b.Bytes < n {
		return &ArgError{kernel, arg, fmt.Sprintf("buffer has %d bytes, need %d", b.Bytes, n)}
	}
	return nil
}

// GEMM describes Y[M,N] = X[M,K] · W[N,K]ᵀ (+ R[M,N]) with bf16 X and W and fp32 accumulation.
type GEMM struct {
	Y Buffer // output, bf16 (or fp32 when F32Out), row stride LdY
	X Buffer // bf16 [M, K], row stride LdX
	W Buffer // bf16 [N, K], contiguous (PyTorch Linear layout)
	R Buffer // optional residual, same type and stride as Y; may be Y itself (in-place add)

	M, N, K int
	LdX     int // elements between X rows; 0 means K
	LdY     int // elements between Y (and R) rows; 0 means N
	F32Out  bool

	tile   int // 0: choose; 64 or 128 (tests)
	splits int // 0: choose; ≥ 1 (tests)
}

// gemmTile and gemmSplits choose the kernel: the 128×128 tile when it fills the GPU several times over, otherwise
// the 64×64 tile with enough k splits for about four blocks per multiprocessor (weight streaming at small M).
func (d *Device) gemmPlan(g *GEMM) (tile, splits, tps int) {
	kTiles := (g.K + 31) / 32
	sms := d.info.SMs
	if sms <= 0 {
		sms = 132
	}
	tile = g.tile
	if tile == 0 {
		big := ((g.M + 127) / 128) * ((g.N + 127) / 128)
		tile = 64
		if big >= 4*sms {
			tile = 128
		}
	}
	blocks := ((g.M + tile - 1) / tile) * ((g.N + tile - 1) / tile)
	splits = g.splits
	if splits == 0 {
		splits = 1
		if tile == 64 && blocks < 4*sms {
			splits = (4*sms + blocks - 1) / blocks
		}
	}
	splits = max(1, min(splits, kTiles))
	tps = (kTiles + splits - 1) / splits
	splits = (kTiles + tps - 1) / tps
	return tile, splits, tps
}

// GEMM enqueues g. Requirements: K and N multiples of 8, LdX a multiple of 8, LdY even, buffers 16-byte aligned.
func (q *Queue) GEMM(g GEMM) error {
	const op = "GEMM"
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return &ArgError{op, "M, N, K", fmt.Sprintf("%d, %d, %d must be positive", g.M, g.N, g.K)}
	}
	if g.K%8 != 0 || g.N%8 != 0 {
		return &ArgError{op, "N, K", fmt.Sprintf("%d, %d must be multiples of 8", g.N, g.K)}
	}
	if g.LdX == 0 {
		g.LdX = g.K
	}
	if g.LdY == 0 {
		g.LdY = g.N
	}
	if g.LdX < g.K || g.LdX%8 != 0 {
		return &ArgError{op, "LdX", fmt.Sprintf("%d must be ≥ K = %d and a multiple of 8", g.LdX, g.K)}
	}
	if g.LdY < g.N || g.LdY%2 != 0 {
		return &ArgError{op, "LdY", fmt.Sprintf("%d must be ≥ N = %d and even", g.LdY, g.N)}
	}
	ysz := int64(2)
	if g.F32Out {
		ysz = 4
	}
	if err := need(op, "X", g.X, 2*(int64(g.M-1)*int64(g.LdX)+int64(g.K))); err != nil {
		return err
	}
	if err := need(op, "W", g.W, 2*int64(g.N)*int64(g.K)); err != nil {
		return err
	}
	ybytes := ysz * (int64(g.M-1)*int64(g.LdY) + int64(g.N))
	if err := need(op, "Y", g.Y, ybytes); err != nil {
		return err
	}
	if g.R.Ptr != 0 {
		if err := need(op, "R", g.R, ybytes); err != nil {
			return err
		}
	}
	if g.tile != 0 && g.tile != 64 && g.tile != 128 {
		return &ArgError{op, "tile", fmt.Sprintf("%d is not 64 or 128", g.tile)}
	}
	d := q.d
	tile, splits, tps := d.gemmPlan(&g)
	if splits > 1 {
		if err := q.ReserveWorkspace(4 * int64(splits) * int64(g.M) * int64(g.N)); err != nil {
			return err
		}
	}
	yF32 := int32(0)
	if g.F32Out {
		yF32 = 1
	}
	a := &q.args
	a.Reset()
	a.Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(d.ws.Ptr).Ptr(g.X.Ptr).Ptr(g.W.Ptr).
		I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdX)).I32(int32(g.LdY)).I32(yF32).I32(int32(tps))
	grid := cudrv.Dim3{X: (g.M + tile - 1) / tile, Y: (g.N + tile - 1) / tile, Z: splits}
	var err error
	if tile == 128 {
		err = q.launch("gemm", "gemm_bf16_128x128", grid, cudrv.Dim3{X: 256, Y: 1, Z: 1}, 4*(128+128)*64)
	} else {
		err = q.launch("gemm", "gemm_bf16_64x64", grid, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 4*(64+64)*64)
	}
	if err != nil || splits == 1 {
		return err
	}
	a.Reset()
	a.Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(d.ws.Ptr).I32(int32(splits)).I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.LdY)).I32(yF32)
	return q.launch("gemm", "gemm_splitk_reduce", gridFor(int64(g.M)*int64(g.N)/4, 256, d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// gridFor sizes a grid-stride loop over n items: enough blocks to cover n, at most 8 per multiprocessor.
func gridFor(n int64, block, sms int) cudrv.Dim3 {
	if sms <= 0 {
		sms = 132
	}
	b := (n + int64(block) - 1) / int64(block)
	b = max(1, min(b, int64(8*sms)))
	return cudrv.Dim3{X: int(b), Y: 1, Z: 1}
}

// Embedding enqueues y[t] = table[ids[t]] for t < T: table bf16 [V, d], ids int32 [T] on the device, y bf16
// [T, d]. An id outside [0, V) yields a zero row (validate ids on the host to report them).
func (q *Queue) Embedding(y, table, ids Buffer, T, V, d int) error {
	const op = "Embedding"
	if T <= 0 || V <= 0 || d <= 0 || d%8 != 0 {
		return &ArgError{op, "T, V, d", fmt.Sprintf("%d, %d, %d must be positive, d a multiple of 8", T, V, d)}
	}
	if err := need(op, "y", y, 2*int64(T)*int64(d)); err != nil {
		return err
	}
	if err := need(op, "table", table, 2*int64(V)*int64(d)); err != nil {
		return err
	}
	if err := need(op, "ids", ids, 4*int64(T)); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(table.Ptr).Ptr(ids.Ptr).I32(int32(T)).I32(int32(d)).I32(int32(V))
	block := min(128, d/8)
	return q.launch("ops", "embed_bf16", cudrv.Dim3{X: T, Y: (d/8 + block - 1) / block, Z: 1}, cudrv.Dim3{X: block, Y: 1, Z: 1}, 0)
}

// RMSNorm enqueues, for each of the M rows of width n:
//
//	s = x (+ res: then s is rounded to bf16 and stored to sum)
//	y = s / sqrt(mean(s²) + eps) · g,   g = 1 + gain if plusOne, else gain
//
// x, res, sum, y are bf16 [M, n]; gain is fp32 [n]. res and sum are both set or both zero; sum may be res or x
// (in place), y may be x.
func (q *Queue) RMSNorm(y, sum, x, res, gain Buffer, M, n int, eps float32, plusOne bool) error {
	const op = "RMSNorm"
	if M <= 0 || n <= 0 || n%8 != 0 {
		return &ArgError{op, "M, n", fmt.Sprintf("%d, %d must be positive, n a multiple of 8", M, n)}
	}
	sz := 2 * int64(M) * int64(n)
	for _, c := range []struct {
		name string
		b    Buffer
		n    int64
	}{{"y", y, sz}, {"x", x, sz}, {"gain", gain, 4 * int64(n)}} {
		if err := need(op, c.name, c.b, c.n); err != nil {
			return err
		}
	}
	if (res.Ptr == 0) != (sum.Ptr == 0) {
		return &ArgError{op, "res, sum", "set both or neither"}
	}
	if res.Ptr != 0 {
		if err := need(op, "res", res, sz); err != nil {
			return err
		}
		if err := need(op, "sum", sum, sz); err != nil {
			return err
		}
	}
	p1 := int32(0)
	if plusOne {
		p1 = 1
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(sum.Ptr).Ptr(x.Ptr).Ptr(res.Ptr).Ptr(gain.Ptr).I32(int32(M)).I32(int32(n)).F32(eps).I32(p1)
	const rowsPerBlock = 4
	return q.launch("ops", "rmsnorm_bf16", cudrv.Dim3{X: (M + rowsPerBlock - 1) / rowsPerBlock, Y: 1, Z: 1}, cudrv.Dim3{X: 32 * rowsPerBlock, Y: 1, Z: 1}, 0)
}

// SwiGLU enqueues y = silu(g) ⊙ u for x bf16 [M, 2F] = [g | u], y bf16 [M, F]; F a multiple of 8.
func (q *Queue) SwiGLU(y, x Buffer, M, F int) error {
	const op = "SwiGLU"
	if M <= 0 || F <= 0 || F%8 != 0 {
		return &ArgError{op, "M, F", fmt.Sprintf("%d, %d must be positive, F a multiple of 8", M, F)}
	}
	if err := need(op, "y", y, 2*int64(M)*int64(F)); err != nil {
		return err
	}
	if err := need(op, "x", x, 4*int64(M)*int64(F)); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).I32(int32(M)).I32(int32(F))
	return q.launch("ops", "swiglu_bf16", gridFor(int64(M)*int64(F)/8, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// SigmoidGate enqueues y = x ⊙ sigmoid(gate) over n bf16 values (n a multiple of 8); y may be x.
func (q *Queue) SigmoidGate(y, x, gate Buffer, n int64) error {
	const op = "SigmoidGate"
	if n <= 0 || n%8 != 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be positive and a multiple of 8", n)}
	}
	for _, c := range []struct {
		name string
		b    Buffer
	}{{"y", y}, {"x", x}, {"gate", gate}} {
		if err := need(op, c.name, c.b, 2*n); err != nil {
			return err
		}
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).Ptr(gate.Ptr).U64(uint64(n))
	return q.launch("ops", "sigmoid_gate_bf16", gridFor(n/8, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// FillUniform enqueues n bf16 values uniform in [-scale, scale) into b, from a hash of (seed, index).
func (q *Queue) FillUniform(b Buffer, n int64, seed uint32, scale float32) error {
	const op = "FillUniform"
	if n <= 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be positive", n)}
	}
	if err := need(op, "b", b, 2*n); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(b.Ptr).U64(uint64(n)).U32(seed).F32(scale)
	return q.launch("ops", "fill_uniform_bf16", gridFor(n, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}
