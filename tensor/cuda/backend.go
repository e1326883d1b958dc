//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Name is the name the backend registers under.
const Name = "cuda"

func init() {
	// A GPU is opened only when tensor.OpenDevice("cuda", n) (or tensor.Open, GPU 0) is called; importing touches
	// no GPU.
	tensor.RegisterDevices(Name, tensor.Devices{
		Open:  func(ordinal int) (tensor.Backend, error) { return New(ordinal) },
		Count: Count,
	})
}

// Count returns the number of CUDA devices the driver sees.
func Count() (int, error) {
	n, err := cu.NumDevices()
	return n, cudrv.Wrap("cuDeviceGetCount", err)
}

// Backend is tensor.Backend on one GPU. Storage: FromHost converts F32 matrices (rank ≥ 2) to BF16 once and keeps
// BF16 as it is; vectors and everything from FromFloat32 stay F32 (norm gains, A_log, dt_bias, the pointer head);
// FromFloat32FP8 makes F8E4M3 weights (tensor.FP8), which only the matrix products take, as w. Operation results are BF16 when their main input is BF16 and F32 otherwise, except the recurrent state and the
// delta-rule gates, always F32, and Embedding, SplitCols and the convolution state, which keep the input's type.
// All arithmetic is fp32. Device memory comes from a size-class pool: Free hands it back for the next operation.
//
// Operations may be called from several goroutines; they are serialised on the goroutine that owns the device.
// Each one called from outside is handed over to that goroutine (a channel send and an OS thread wake-up, several
// microseconds); inside Run they are called there directly. Operations enqueue work and return: only ToHost and
// Pointer wait for the device.
type Backend struct {
	dev  *Device
	own  bool
	pool pool
	mu   sync.Mutex // guards Tensor.freed, Tensor.q8 and the view fields (base, refs, dense)

	// fp8: the backend has made an F8E4M3 tensor (FromFloat32FP8, uploadFP8), so it computes with FP8 weights: from
	// then on the producers of the activations FP8 products read also write their E4M3 codes (fp8_fuse.go). Set and
	// read on the device goroutine.
	fp8 bool
}

// New opens GPU ordinal and returns a backend that owns it (Close releases it).
func New(ordinal int) (*Backend, error) {
	d, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	return &Backend{dev: d, own: true}, nil
}

// NewOn returns a backend on an open Device, which the caller keeps and closes after the backend.
func NewOn(d *Device) *Backend { return &Backend{dev: d} }

// Name returns "cuda".
func (b *Backend) Name() string { return Name }

// Device returns the GPU the backend runs on.
func (b *Backend) Device() *Device { return b.dev }

// Describe names the GPU, e.g. "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)".
func (b *Backend) Describe() string {
	in := b.dev.Info()
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %.1f GiB)", in.Name, in.Major, in.Minor, in.SMs, float64(in.Memory)/(1<<30))
}

// Run runs f on the goroutine that owns the device (tensor.Runner): the operations f calls skip the hand-over.
// Wrap a whole model pass in it. f must not wait for other goroutines that use the backend (they wait for f) nor
// call runtime.Goexit; a panic in f comes back as an error.
func (b *Backend) Run(f func() error) error { return b.dev.Run(f) }

// Stats returns the device's counters with the pool's allocations from the driver.
func (b *Backend) Stats() Stats {
	s := b.dev.Stats()
	s.DriverAllocs = b.pool.driverAllocs()
	return s
}

// MemStats reports the device memory the pool holds from the driver and the part of it free for reuse.
func (b *Backend) MemStats() (held, cached int64) { return b.pool.stats() }

// Trim returns the pool's free memory to the driver.
func (b *Backend) Trim() error {
	return b.dev.Do(func(q *Queue) error {
		err := q.Sync()
		b.pool.trim()
		return err
	})
}

// Close waits for the device, returns the pool's free memory and, when the backend opened the device, closes it.
// Tensors still alive must not be used afterwards.
func (b *Backend) Close() error {
	err := b.Trim()
	if b.own {
		if cerr := b.dev.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Tensor is the CUDA backend's tensor: row-major device memory, or a column view of another tensor's memory.
//
// SplitCols returns views: a view's rows lie ld elements apart inside its base's memory, which stays allocated
// until the base and all its views are freed. Operations that read strided rows (the convolution over segments,
// DeltaGates, GatedRMSNorm's gate, QKNormRope) read a view in place; every other operation reads the view's
// contiguous copy, made once on first use, after which the view no longer holds its base.
type Tensor struct {
	shape []int
	dtype tensor.DType
	buf   Buffer // a view: from its first element to the end of its base's memory
	b     *Backend
	freed bool

	base  *Tensor // the tensor a view reads (nil: not a view, or a view that holds its dense copy)
	off   int     // a view's first column in base's rows
	ld    int     // a view's row stride in elements
	refs  int     // views reading this tensor's memory, not yet freed nor densified
	dense *Tensor // a view's contiguous copy

	loaded bool // holds data uploaded from the host, which no kernel writes (FromHost, FromBits, …): GEMM.WLoaded

	// q8: the E4M3 codes and row scales of the tensor's values, written by the kernel that wrote the values (a BF16
	// matrix from a producer of FP8 products' activations, fp8_fuse.go); zero when it has none. A view never has
	// codes, and no operation writes into an existing tensor, so they never go stale. Freed with the tensor.
	q8 fp8Codes
}

// Shape returns the tensor's dimensions.
func (t *Tensor) Shape() []int { return t.shape }

// DType returns the storage type.
func (t *Tensor) DType() tensor.DType { return t.dtype }

// Operand returns the tensor's storage for the Queue's kernels.
func (t *Tensor) Operand() Operand { return Operand{t.buf, t.dtype} }

// ErrFreed is returned when an operation receives a tensor passed to Free.
var ErrFreed = errors.New("cuda: tensor used after Free")

// Free hands the tensors' memory back to the pool; nil and foreign tensors are ignored, double frees are harmless.
func (b *Backend) Free(ts ...tensor.Tensor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range ts {
		c, ok := t.(*Tensor)
		if !ok || c == nil || c.b != b || c.freed {
			continue
		}
		c.freed = true
		b.pool.put(c.q8.buf)
		c.q8 = fp8Codes{}
		if c.dense != nil {
			c.dense.freed = true
			b.pool.put(c.dense.buf)
			c.dense.buf = Buffer{}
		}
		if c.ld != 0 {
			b.release(c)
			c.buf = Buffer{}
			continue
		}
		if c.refs == 0 {
			b.pool.put(c.buf)
			c.buf = Buffer{}
		}
	}
}

// release drops view v's hold on its base, handing the base's memory back once the base is freed and no other
// view reads it. The caller holds b.mu.
func (b *Backend) release(v *Tensor) {
	base := v.base
	if base == nil {
		return
	}
	v.base = nil
	base.refs--
	if base.freed && base.refs == 0 {
		b.pool.put(base.buf)
		base.buf = Buffer{}
	}
}

// act is the result type of an operation whose main input has type dt.
func act(dt tensor.DType) tensor.DType {
	if dt == tensor.BF16 {
		return tensor.BF16
	}
	return tensor.F32
}

// scope is one round trip to the device goroutine: it allocates results and temporaries from the pool, hands the
// temporaries back at the end, and the results too if the operation fails.
type scope struct {
	b     *Backend
	q     *Queue
	outs  []*Tensor
	temps []Buffer
}

// run executes f on the device goroutine.
func (b *Backend) run(f func(s *scope) error) error {
	return b.dev.Do(func(q *Queue) error {
		end, err := q.opStart()
		defer end()
		if err != nil {
			return err
		}
		s := &scope{b: b, q: q}
		err = f(s)
		for _, t := range s.temps {
			b.pool.put(t)
		}
		if err != nil {
			for _, t := range s.outs {
				b.pool.put(t.buf)
				b.pool.put(t.q8.buf)
			}
		}
		return err
	})
}

// alloc takes n > 0 bytes from the pool; if the driver is out of memory, it returns the pool's free memory to the
// driver and tries once more.
func (s *scope) alloc(n int64) (Buffer, error) {
	buf, err := s.b.pool.get(n)
	if err == nil {
		return buf, nil
	}
	if serr := s.q.Sync(); serr != nil {
		return Buffer{}, serr
	}
	if s.b.pool.trim() == 0 {
		return Buffer{}, err
	}
	return s.b.pool.get(n)
}

// out allocates a result tensor (no memory when it has no elements). A BF16 matrix gets tileRoom rows of room
// past its last row, which a GEMM reading it as X may read (xRows).
func (s *scope) out(dt tensor.DType, shape ...int) (*Tensor, error) {
	return s.newTensor(dt, true, shape)
}

// newTensor allocates a tensor, with room past a BF16 matrix's last row when room is set.
func (s *scope) newTensor(dt tensor.DType, room bool, shape []int) (*Tensor, error) {
	t := &Tensor{shape: shape, dtype: dt, b: s.b}
	if n := int64(tensor.Numel(shape)); n > 0 {
		var err error
		if cols := shape[len(shape)-1]; room && len(shape) >= 2 && dt == tensor.BF16 {
			n += int64(tileRoom(int(n)/cols)) * int64(cols)
		}
		if t.buf, err = s.alloc(n * elemSize(dt)); err != nil {
			return nil, err
		}
	}
	s.outs = append(s.outs, t)
	return t, nil
}

// temp allocates n > 0 bytes for the duration of the round trip.
func (s *scope) temp(n int64) (Buffer, error) {
	buf, err := s.alloc(n)
	if err != nil {
		return Buffer{}, err
	}
	s.temps = append(s.temps, buf)
	return buf, nil
}

// ints uploads v (non-empty) into a temporary buffer.
func (s *scope) ints(v []int32) (Buffer, error) {
	if s.q.recording() { // a pass graph's record: a place in the device staging buffer
		if buf, ok, err := s.q.stageInts(v); ok || err != nil {
			return buf, err
		}
	}
	buf, err := s.temp(4 * int64(len(v)))
	if err != nil {
		return Buffer{}, err
	}
	return buf, s.q.Upload(buf, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
}

// intParts uploads parts (not all empty) one after another in one buffer, in one upload, and returns each part's
// place in it.
func (s *scope) intParts(parts ...[]int32) ([]Buffer, error) {
	var all []int32
	offs := make([]int, len(parts))
	for k, p := range parts {
		offs[k] = len(all)
		all = append(all, p...)
	}
	tb, err := s.ints(all)
	if err != nil {
		return nil, err
	}
	bufs := make([]Buffer, len(parts))
	for k, o := range offs {
		bufs[k] = Buffer{Ptr: tb.Ptr + cu.DevicePtr(4*o), Bytes: tb.Bytes - 4*int64(o)}
	}
	return bufs, nil
}

func checkShape(shape []int, n int) error {
	for _, s := range shape {
		if s < 0 {
			return fmt.Errorf("cuda: negative dimension in shape %v", shape)
		}
	}
	if tensor.Numel(shape) != n {
		return fmt.Errorf("cuda: shape %v holds %d elements, data has %d", shape, tensor.Numel(shape), n)
	}
	return nil
}

// upload copies raw element bytes into a new tensor.
func (b *Backend) upload(dt tensor.DType, shape []int, raw []byte) (tensor.Tensor, error) {
	shape = append([]int(nil), shape...)
	var t *Tensor
	err := b.run(func(s *scope) error {
		var err error
		if t, err = s.newTensor(dt, false, shape); err != nil || len(raw) == 0 { // no room: weights stay their size
			return err
		}
		return s.q.Upload(t.buf, raw)
	})
	if err != nil {
		return nil, err
	}
	t.loaded = true
	return t, nil
}

// FromHost uploads a host tensor. F32 tensors of rank 2 or more (weight matrices) are converted to BF16; F32
// vectors stay F32; BF16 stays BF16.
func (b *Backend) FromHost(t *qwen35.Tensor) (tensor.Tensor, error) {
	if t == nil {
		return nil, errors.New("cuda: FromHost: nil tensor")
	}
	switch t.DType {
	case qwen35.F32:
		if len(t.Shape) < 2 {
			return b.FromFloat32(t.Shape, t.F32)
		}
		bits := make([]uint16, len(t.F32))
		for i, v := range t.F32 {
			bits[i] = half.BF16FromF32(v)
		}
		return b.FromBits(tensor.BF16, t.Shape, bits)
	case qwen35.BF16:
		return b.FromBits(tensor.BF16, t.Shape, t.BF16)
	case qwen35.F16:
		return nil, &DTypeError{DType: "F16", Reason: "fp16 weights are not supported: the CUDA backend computes with bf16 weights (use bf16 or fp32, which it rounds to bf16)"}
	}
	return nil, fmt.Errorf("cuda: FromHost: unsupported dtype %v", t.DType)
}

// DTypeError reports weights of a type the CUDA backend does not compute with.
type DTypeError struct {
	DType  string // "F16"
	Reason string
}

// Error names the type and why it is refused.
func (e *DTypeError) Error() string { return "cuda: " + e.DType + ": " + e.Reason }

// FromFloat32 uploads data into a new F32 tensor of the given shape.
func (b *Backend) FromFloat32(shape []int, data []float32) (tensor.Tensor, error) {
	if err := checkShape(shape, len(data)); err != nil {
		return nil, err
	}
	var raw []byte
	if len(data) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return b.upload(tensor.F32, shape, raw)
}

// FromBits uploads 16-bit data (BF16 or F16) into a new tensor.
func (b *Backend) FromBits(dtype tensor.DType, shape []int, data []uint16) (tensor.Tensor, error) {
	if dtype == tensor.F8E4M3 {
		return nil, &tensor.DTypeError{Backend: Name, DType: dtype, Reason: "FromBits takes 16-bit data; upload FP8 weights with FromFloat32FP8"}
	}
	if dtype != tensor.BF16 && dtype != tensor.F16 {
		return nil, fmt.Errorf("cuda: FromBits: dtype %v is not a 16-bit type", dtype)
	}
	if err := checkShape(shape, len(data)); err != nil {
		return nil, err
	}
	var raw []byte
	if len(data) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 2*len(data))
	}
	return b.upload(dtype, shape, raw)
}

// ToHost copies t back as float32 after the queued work has finished.
func (b *Backend) ToHost(t tensor.Tensor) ([]float32, error) {
	c, err := b.get("ToHost", "t", t)
	if err != nil {
		return nil, err
	}
	if c.dtype == tensor.F8E4M3 {
		return b.toHostFP8(c)
	}
	n := tensor.Numel(c.shape)
	out := make([]float32, n)
	if n == 0 {
		return out, nil
	}
	if c.dtype == tensor.F32 {
		err = b.run(func(s *scope) error {
			return s.q.Download(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*n), c.buf)
		})
		return out, err
	}
	bits := make([]uint16, n)
	if err := b.run(func(s *scope) error {
		return s.q.Download(unsafe.Slice((*byte)(unsafe.Pointer(&bits[0])), 2*n), c.buf)
	}); err != nil {
		return nil, err
	}
	for i, h := range bits {
		if c.dtype == tensor.BF16 {
			out[i] = half.BF16ToF32(h)
		} else {
			out[i] = half.F16ToF32(h)
		}
	}
	return out, nil
}

// get unwraps a tensor of this backend.
func (b *Backend) get(op, arg string, t tensor.Tensor) (*Tensor, error) {
	c, ok := t.(*Tensor)
	if !ok || c == nil {
		if t == nil || ok {
			return nil, &tensor.ShapeError{Op: op, Arg: arg, Want: "a tensor"}
		}
		return nil, fmt.Errorf("cuda: %s: %s is a %T, not a cuda tensor", op, arg, t)
	}
	if c.b != b {
		return nil, fmt.Errorf("cuda: %s: %s belongs to another cuda backend", op, arg)
	}
	b.mu.Lock()
	freed, view := c.freed, c.ld != 0
	b.mu.Unlock()
	if freed {
		return nil, fmt.Errorf("cuda: %s: %s: %w", op, arg, ErrFreed)
	}
	if view {
		return b.densify(op, arg, c)
	}
	return c, nil
}

// densify returns view v's contiguous copy, making it on first use (one copy launch); the view then no longer
// holds its base.
func (b *Backend) densify(op, arg string, v *Tensor) (*Tensor, error) {
	var d *Tensor
	err := b.run(func(s *scope) error {
		b.mu.Lock()
		d = v.dense
		base, freed := v.base, v.freed
		b.mu.Unlock()
		if freed {
			return fmt.Errorf("cuda: %s: %s: %w", op, arg, ErrFreed)
		}
		if d != nil {
			return nil
		}
		m, w := v.shape[0], v.shape[1]
		t := &Tensor{shape: v.shape, dtype: v.dtype, b: b}
		if m > 0 && w > 0 {
			var err error
			if t.buf, err = s.alloc(int64(m) * int64(w) * elemSize(v.dtype)); err != nil {
				return err
			}
			if err := s.q.CopyCols(t.Operand(), Operand{base.buf, base.dtype}, m, v.ld, v.off, w); err != nil {
				b.pool.put(t.buf)
				return err
			}
		}
		b.mu.Lock()
		v.dense, d = t, t
		b.release(v)
		b.mu.Unlock()
		return nil
	})
	return d, err
}

// strided unwraps a matrix with the given dims (−1: any) that the caller reads with a row stride: a view in
// place, or a dense tensor. It returns the tensor whose buf holds the first element, and the stride.
func (b *Backend) strided(op, arg string, t tensor.Tensor, rows, cols int) (*Tensor, int, error) {
	c, ok := t.(*Tensor)
	if ok && c != nil && c.b == b {
		b.mu.Lock()
		freed, base, dense, ld := c.freed, c.base, c.dense, c.ld
		b.mu.Unlock()
		if !freed && ld != 0 && base != nil && dense == nil {
			if err := tensor.CheckMatrix(op, arg, c.shape, rows, cols); err != nil {
				return nil, 0, err
			}
			return c, ld, nil
		}
	}
	d, err := b.matrix(op, arg, t, rows, cols)
	if err != nil {
		return nil, 0, err
	}
	return d, d.shape[1], nil
}

// matrix unwraps t and checks it is 2-D with the given dims (−1: any).
func (b *Backend) matrix(op, arg string, t tensor.Tensor, rows, cols int) (*Tensor, error) {
	c, err := b.get(op, arg, t)
	if err != nil {
		return nil, err
	}
	if err := tensor.CheckMatrix(op, arg, c.shape, rows, cols); err != nil {
		return nil, err
	}
	return c, nil
}

// vector unwraps t and checks it holds n elements (any shape).
func (b *Backend) vector(op, arg string, t tensor.Tensor, n int) (*Tensor, error) {
	c, err := b.get(op, arg, t)
	if err != nil {
		return nil, err
	}
	if err := tensor.CheckElements(op, arg, c.shape, n); err != nil {
		return nil, err
	}
	return c, nil
}

// segments checks lens against n rows and returns each segment's start and length.
func segments(op string, lens []int, n int) (starts, ls []int32, err error) {
	if lens == nil {
		return []int32{0}, []int32{int32(n)}, nil
	}
	sum := 0
	for i, l := range lens {
		if l < 0 {
			return nil, nil, fmt.Errorf("cuda: %s: lens[%d] = %d is negative", op, i, l)
		}
		starts = append(starts, int32(sum))
		ls = append(ls, int32(l))
		sum += l
	}
	if sum != n {
		return nil, nil, fmt.Errorf("cuda: %s: lens sum to %d, rows are %d", op, sum, n)
	}
	return starts, ls, nil
}

// rowStarts returns, for each of the n rows, the first row of its segment.
func rowStarts(starts, ls []int32, n int) []int32 {
	out := make([]int32, n)
	for s, s0 := range starts {
		for t := s0; t < s0+ls[s]; t++ {
			out[t] = s0
		}
	}
	return out
}

var (
	_ tensor.Backend = (*Backend)(nil)
	_ tensor.Runner  = (*Backend)(nil)
	_ tensor.FP8     = (*Backend)(nil)
)

// GraphCounts returns the device's pass-graph counters, and whether pass graphs are on (see Device.SetGraphs).
func (b *Backend) GraphCounts() (GraphCounts, bool) { return b.dev.GraphCounts() }

// GraphStats returns Kev's pass-graph counters (GraphCounts) as plain numbers, for callers that do not import
// this package; on is false when pass graphs are off.
func (b *Backend) GraphStats() (captured, kept, pending, failed, replays, eager int, on bool) {
	c, on := b.dev.GraphCounts()
	return c.Captured, c.Kept, c.Pending, c.Failed + c.Dropped, c.Replays, c.Eager, on
}

// SetGraphs sets how many pass graphs the device keeps (0: graphs off); see Device.SetGraphs.
func (b *Backend) SetGraphs(max int) error { return b.dev.SetGraphs(max) }
