// Package cpu is the reference backend of package tensor: plain Go, float32
// compute on all cores. Activations are float32; weights keep the storage
// type they were uploaded with, so a bf16 checkpoint costs two bytes per
// parameter. MatMul widens F16 weights exactly, block by block; with a BF16
// weight it computes in bf16 (bf16.go): x rounded to bf16, the bf16 products
// summed in float32, on AMX or AVX512_BF16 where the processor has them.
//
// Importing the package registers the backend as "cpu":
//
//	import _ "github.com/kevgo/kev/tensor/cpu"
package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Name is the name the backend registers under.
const Name = "cpu"

func init() {
	tensor.Register(Name, func() (tensor.Backend, error) { return New(), nil })
}

// Backend is the CPU backend. Its operations may be called from several
// goroutines at once; each parallelises itself over Threads goroutines: the
// caller and workers of a pool the backend starts on first use (they end
// once the backend is unreachable).
type Backend struct {
	// Threads is the number of goroutines an operation may use; New sets it
	// to GOMAXPROCS.
	Threads int

	generic bool // use the plain Go MatMul kernel even where a faster one exists

	poolOnce sync.Once
	pool     *workerPool // started on first use (see parallel)
}

// New returns a CPU backend using all available cores.
func New() *Backend { return &Backend{Threads: runtime.GOMAXPROCS(0)} }

// Name returns "cpu".
func (b *Backend) Name() string { return Name }

// Tensor is the CPU backend's tensor: row-major host memory.
type Tensor struct {
	shape []int
	dtype tensor.DType
	f32   []float32 // dtype F32
	bits  []uint16  // dtype BF16 or F16
	freed bool
	owned bool // f32 came from allocF32 and is referenced by nothing else

	// A MatMul weight is packed on its first use and kept packed: an
	// uploaded F32 matrix trades its row-major f32 for panels (packedWeight,
	// gemm.go), a BF16 matrix keeps its bits beside its panels only when they
	// are mapped file memory (bf16Panels, bf16.go). mu guards the swap;
	// readers of such a tensor go through rowMajor, copyRows, halfBits or
	// halfRows.
	uploaded   bool // f32 came from FromFloat32: packable
	heap       bool // bits is the tensor's own heap copy (not mapped file memory)
	mu         sync.RWMutex
	packed     atomic.Pointer[panels]
	packedBF16 atomic.Pointer[bf16Panels]

	// keyRuns keeps the keys and values that attention calls on this tensor
	// as k transposed, for the next such call (AttentionRows; mu guards it).
	keyRuns map[keyID]*attnKeys
}

// Shape returns the tensor's dimensions.
func (t *Tensor) Shape() []int { return t.shape }

// DType returns the storage type.
func (t *Tensor) DType() tensor.DType { return t.dtype }

// ErrFreed is returned when an operation receives a tensor passed to Free.
var ErrFreed = errors.New("cpu: tensor used after Free")

// newF32 returns a zeroed F32 tensor whose storage Free may recycle.
func newF32(shape ...int) *Tensor {
	return &Tensor{shape: shape, dtype: tensor.F32, f32: allocF32(tensor.Numel(shape)), owned: true}
}

// newF32Full returns an F32 tensor whose storage Free may recycle, for a
// result its operation writes in full: its values are undefined until then.
func newF32Full(shape ...int) *Tensor {
	f, _ := allocF32Dirty(tensor.Numel(shape))
	return &Tensor{shape: shape, dtype: tensor.F32, f32: f, owned: true}
}

func checkShape(shape []int, n int) error {
	for _, s := range shape {
		if s < 0 {
			return fmt.Errorf("cpu: negative dimension in shape %v", shape)
		}
	}
	if tensor.Numel(shape) != n {
		return fmt.Errorf("cpu: shape %v holds %d elements, data has %d", shape, tensor.Numel(shape), n)
	}
	return nil
}

// FromHost uploads a host tensor, copying its data and keeping its type. BF16 and F16 data marked Mapped (read-only, from a
// weights file mapped into memory) is kept by reference, not copied: those pages stay file-backed.
func (b *Backend) FromHost(t *qwen35.Tensor) (tensor.Tensor, error) {
	if t == nil {
		return nil, errors.New("cpu: FromHost: nil tensor")
	}
	switch t.DType {
	case qwen35.F32:
		return b.FromFloat32(t.Shape, t.F32)
	case qwen35.BF16:
		if t.Mapped {
			if err := checkShape(t.Shape, len(t.BF16)); err != nil {
				return nil, err
			}
			return &Tensor{shape: append([]int(nil), t.Shape...), dtype: tensor.BF16, bits: t.BF16}, nil
		}
		return b.FromBits(tensor.BF16, t.Shape, t.BF16)
	case qwen35.F16:
		if t.Mapped {
			if err := checkShape(t.Shape, len(t.F16)); err != nil {
				return nil, err
			}
			return &Tensor{shape: append([]int(nil), t.Shape...), dtype: tensor.F16, bits: t.F16}, nil
		}
		return b.FromBits(tensor.F16, t.Shape, t.F16)
	}
	return nil, fmt.Errorf("cpu: FromHost: unsupported dtype %v", t.DType)
}

// FromFloat32 copies data into a new F32 tensor of the given shape.
func (b *Backend) FromFloat32(shape []int, data []float32) (tensor.Tensor, error) {
	if err := checkShape(shape, len(data)); err != nil {
		return nil, err
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: tensor.F32, f32: append([]float32(nil), data...), uploaded: true}, nil
}

// FromBits copies 16-bit data (BF16 or F16) into a new tensor.
func (b *Backend) FromBits(dtype tensor.DType, shape []int, data []uint16) (tensor.Tensor, error) {
	if dtype == tensor.F8E4M3 {
		return nil, &tensor.DTypeError{Backend: Name, DType: dtype, Reason: "FP8 weights need the cuda backend on an NVIDIA GPU of compute capability 9.0 (Hopper)"}
	}
	if dtype != tensor.BF16 && dtype != tensor.F16 {
		return nil, fmt.Errorf("cpu: FromBits: dtype %v is not a 16-bit type", dtype)
	}
	if err := checkShape(shape, len(data)); err != nil {
		return nil, err
	}
	return &Tensor{shape: append([]int(nil), shape...), dtype: dtype, bits: append([]uint16(nil), data...), heap: true}, nil
}

// ToHost returns a float32 copy of t.
func (b *Backend) ToHost(t tensor.Tensor) ([]float32, error) {
	c, err := get("ToHost", "t", t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, tensor.Numel(c.shape))
	if len(c.shape) == 2 {
		c.copyRows(out, 0, c.shape[0])
	} else {
		copy(out, c.float32s())
	}
	return out, nil
}

// Free drops the tensors' storage; results of operations give theirs back
// for reuse by later results. Freeing a tensor twice is harmless.
func (b *Backend) Free(ts ...tensor.Tensor) {
	for _, t := range ts {
		if c, ok := t.(*Tensor); ok && c != nil && !c.freed {
			if c.owned {
				recycle(c.f32)
			}
			c.mu.Lock()
			for _, r := range c.keyRuns {
				r.recycle()
			}
			c.f32, c.bits, c.freed, c.keyRuns = nil, nil, true, nil
			c.packed.Store(nil)
			c.packedBF16.Store(nil)
			c.mu.Unlock()
		}
	}
}

// widen converts 16-bit values to float32.
func widen(dst []float32, src []uint16, dtype tensor.DType) {
	if dtype == tensor.BF16 {
		for i, h := range src {
			dst[i] = half.BF16ToF32(h)
		}
		return
	}
	for i, h := range src {
		dst[i] = half.F16ToF32(h)
	}
}

// get unwraps a tensor of this backend.
func get(op, arg string, t tensor.Tensor) (*Tensor, error) {
	c, ok := t.(*Tensor)
	if !ok || c == nil {
		if t == nil {
			return nil, &tensor.ShapeError{Op: op, Arg: arg, Want: "a tensor"}
		}
		return nil, fmt.Errorf("cpu: %s: %s is a %T, not a cpu tensor", op, arg, t)
	}
	if c.freed {
		return nil, fmt.Errorf("cpu: %s: %s: %w", op, arg, ErrFreed)
	}
	return c, nil
}

// float32s returns a tensor's float32 data in row-major order, widening
// 16-bit storage and unpacking a packed weight. The caller must not write
// to it.
func (t *Tensor) float32s() []float32 {
	if t.dtype == tensor.F32 {
		return t.rowMajor()
	}
	bits := t.halfBits()
	out := make([]float32, len(bits))
	widen(out, bits, t.dtype)
	return out
}

// matrix unwraps t and checks it is 2-D with the given dims (−1: any).
func matrix(op, arg string, t tensor.Tensor, rows, cols int) (*Tensor, error) {
	c, err := get(op, arg, t)
	if err != nil {
		return nil, err
	}
	if err := tensor.CheckMatrix(op, arg, c.shape, rows, cols); err != nil {
		return nil, err
	}
	return c, nil
}

// vector unwraps t and checks it holds n elements (any shape).
func vector(op, arg string, t tensor.Tensor, n int) (*Tensor, error) {
	c, err := get(op, arg, t)
	if err != nil {
		return nil, err
	}
	if err := tensor.CheckElements(op, arg, c.shape, n); err != nil {
		return nil, err
	}
	return c, nil
}

// segments checks lens against n rows and returns segment start offsets.
func segments(op string, lens []int, n int) ([]int, []int, error) {
	if lens == nil {
		return []int{0}, []int{n}, nil
	}
	starts := make([]int, len(lens))
	sum := 0
	for i, l := range lens {
		if l < 0 {
			return nil, nil, fmt.Errorf("cpu: %s: lens[%d] = %d is negative", op, i, l)
		}
		starts[i] = sum
		sum += l
	}
	if sum != n {
		return nil, nil, fmt.Errorf("cpu: %s: lens sum to %d, rows are %d", op, sum, n)
	}
	return starts, lens, nil
}

// Kernels names the matrix kernels MatMul runs on this processor: the
// float32 micro-kernel (avx512, avx2 or go) and the one for BF16 weights
// (amx, avx512bf16 or widen), as "fp32 avx512, bf16 amx".
func Kernels() string { return "fp32 " + gemmKern.String() + ", bf16 " + bf16Use.String() }

// Describe names the kernels this backend runs and its threads, e.g. "CPU:
// fp32 avx512, bf16 amx, 16 threads".
func (b *Backend) Describe() string {
	k := Kernels()
	if b.generic {
		k = "fp32 go, bf16 widen"
	}
	return fmt.Sprintf("CPU: %s, %d threads", k, max(b.Threads, 1))
}
