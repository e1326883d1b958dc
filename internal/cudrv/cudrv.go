//go:build cuda

package cudrv

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>

// kev_launch builds the kernel parameter array in C memory: params[i] points at buf + offs[i].
// The driver copies the parameter values before cuLaunchKernel returns.
static CUresult kev_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shmem, CUstream s, char *buf, const int32_t *offs, int n) {
	void *params[64];
	if (n > 64) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) params[i] = buf + offs[i];
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, n ? params : NULL, NULL);
}

// kev_launch_pdl is kev_launch through cuLaunchKernelEx with programmatic stream serialisation: the kernel may
// start while the one before it on the stream finishes (it waits for it with griddepcontrol.wait).
static CUresult kev_launch_pdl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		unsigned bz, unsigned shmem, CUstream s, char *buf, const int32_t *offs, int n) {
	void *params[64];
	if (n > 64) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) params[i] = buf + offs[i];
	CUlaunchAttribute attr;
	attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr.value.programmaticStreamSerializationAllowed = 1;
	CUlaunchConfig cfg = {0};
	cfg.gridDimX = gx; cfg.gridDimY = gy; cfg.gridDimZ = gz;
	cfg.blockDimX = bx; cfg.blockDimY = by; cfg.blockDimZ = bz;
	cfg.sharedMemBytes = shmem;
	cfg.hStream = s;
	cfg.attrs = &attr;
	cfg.numAttrs = 1;
	return cuLaunchKernelEx(&cfg, f, n ? params : NULL, NULL);
}

// kev_max_active_clusters is cuOccupancyMaxActiveClusters for f (whose cluster shape is compiled in) launched as
// grid × block with shmem bytes of dynamic shared memory.
static CUresult kev_max_active_clusters(int *n, CUfunction f, unsigned gx, unsigned bx, unsigned shmem) {
	CUlaunchConfig cfg = {0};
	cfg.gridDimX = gx; cfg.gridDimY = 1; cfg.gridDimZ = 1;
	cfg.blockDimX = bx; cfg.blockDimY = 1; cfg.blockDimZ = 1;
	cfg.sharedMemBytes = shmem;
	return cuOccupancyMaxActiveClusters(n, f, &cfg);
}

// kev_graph_chain writes the nodes of g into out in order when g is one chain (a single root, each node followed by
// at most one other, through one edge or several), and their count into *n; CUDA_ERROR_INVALID_VALUE when it is
// not a chain or has more than cap nodes.
static CUresult kev_graph_chain(CUgraph g, CUgraphNode *out, size_t cap, size_t *n) {
	size_t roots = 0;
	CUresult r = cuGraphGetRootNodes(g, NULL, &roots);
	if (r != CUDA_SUCCESS) return r;
	*n = 0;
	if (roots == 0) return CUDA_SUCCESS;
	if (roots != 1 || cap == 0) return CUDA_ERROR_INVALID_VALUE;
	CUgraphNode cur;
	roots = 1;
	if ((r = cuGraphGetRootNodes(g, &cur, &roots)) != CUDA_SUCCESS) return r;
	for (;;) {
		if (*n == cap) return CUDA_ERROR_INVALID_VALUE;
		out[(*n)++] = cur;
		CUgraphNode deps[4];
		CUgraphEdgeData edges[4];
		size_t nd = 0;
		if ((r = cuGraphNodeGetDependentNodes_v2(cur, NULL, NULL, &nd)) != CUDA_SUCCESS) return r;
		if (nd == 0) return CUDA_SUCCESS;
		if (nd > 4) return CUDA_ERROR_INVALID_VALUE;
		if ((r = cuGraphNodeGetDependentNodes_v2(cur, deps, edges, &nd)) != CUDA_SUCCESS) return r;
		for (size_t i = 1; i < nd; i++) // several edges (a programmatic one and a full one, say) to one node
			if (deps[i] != deps[0]) return CUDA_ERROR_INVALID_VALUE;
		cur = deps[0];
	}
}

// kev_exec_kernel sets kernel node nd of exec e (from its graph) to launch f with the shape and parameters given
// (built as kev_launch builds them), keeping the node's other fields.
static CUresult kev_exec_kernel(CUgraphExec e, CUgraphNode nd, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shmem, char *buf, const int32_t *offs, int n) {
	void *params[64];
	if (n > 64) return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) params[i] = buf + offs[i];
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult r = cuGraphKernelNodeGetParams(nd, &p);
	if (r != CUDA_SUCCESS) return r;
	p.func = f;
	p.kern = NULL;
	p.gridDimX = gx; p.gridDimY = gy; p.gridDimZ = gz;
	p.blockDimX = bx; p.blockDimY = by; p.blockDimZ = bz;
	p.sharedMemBytes = shmem;
	p.kernelParams = n ? params : NULL;
	p.extra = NULL;
	return cuGraphExecKernelNodeSetParams(e, nd, &p);
}

// kev_exec_copy sets copy node nd of exec e to copy n bytes from src to dst, keeping its memory types.
static CUresult kev_exec_copy(CUgraphExec e, CUgraphNode nd, CUdeviceptr dst, CUdeviceptr src, size_t n) {
	CUDA_MEMCPY3D p;
	CUcontext ctx;
	CUresult r = cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS) return r;
	if ((r = cuGraphMemcpyNodeGetParams(nd, &p)) != CUDA_SUCCESS) return r;
	p.srcDevice = src;
	p.dstDevice = dst;
	p.WidthInBytes = n;
	return cuGraphExecMemcpyNodeSetParams(e, nd, &p, ctx);
}

// kev_exec_memset sets fill node nd of exec e to fill n elements at dst with v, keeping its element size.
static CUresult kev_exec_memset(CUgraphExec e, CUgraphNode nd, CUdeviceptr dst, unsigned v, size_t n) {
	CUDA_MEMSET_NODE_PARAMS p;
	CUcontext ctx;
	CUresult r = cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS) return r;
	if ((r = cuGraphMemsetNodeGetParams(nd, &p)) != CUDA_SUCCESS) return r;
	p.dst = dst;
	p.value = v;
	p.width = n;
	return cuGraphExecMemsetNodeSetParams(e, nd, &p, ctx);
}
*/
import "C"

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"gorgonia.org/cu"
)

// Result is a CUDA driver status code (CUresult).
type Result int

// Error is a failed driver call: which call, the status code, and the driver's name and message for it.
type Error struct {
	Op   string // the driver function, e.g. "cuLaunchKernel"
	Code Result
	Name string // e.g. "CUDA_ERROR_INVALID_VALUE"
	Msg  string // the driver's description
}

// Error formats the failure as "cudrv: op: NAME (code): message".
func (e *Error) Error() string {
	return fmt.Sprintf("cudrv: %s: %s (%d): %s", e.Op, e.Name, int(e.Code), e.Msg)
}

// OutOfMemory reports whether the driver ran out of device memory (CUDA_ERROR_OUT_OF_MEMORY), so that callers
// such as the predictor's prefix-cache retry can tell exhaustion from other failures.
func (e *Error) OutOfMemory() bool { return e.Code == 2 }

// ErrorName returns the driver's name for code (cuGetErrorName), or "CUDA_ERROR_<code>" if it has none.
func ErrorName(code Result) string {
	var p *C.char
	if C.cuGetErrorName(C.CUresult(code), &p) != C.CUDA_SUCCESS || p == nil {
		return fmt.Sprintf("CUDA_ERROR_%d", int(code))
	}
	return C.GoString(p)
}

// ErrorString returns the driver's description of code (cuGetErrorString).
func ErrorString(code Result) string {
	var p *C.char
	if C.cuGetErrorString(C.CUresult(code), &p) != C.CUDA_SUCCESS || p == nil {
		return "unknown error"
	}
	return C.GoString(p)
}

// check turns a CUresult into nil or an *Error for op.
func check(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	code := Result(r)
	return &Error{Op: op, Code: code, Name: ErrorName(code), Msg: ErrorString(code)}
}

// Wrap converts an error returned by gorgonia.org/cu (a driver status code) into an *Error with the driver's
// name and message for it, naming op. Other errors get op prepended; nil stays nil.
func Wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*Error); ok {
		return err
	}
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		code := Result(v.Int())
		return &Error{Op: op, Code: code, Name: ErrorName(code), Msg: ErrorString(code)}
	}
	return fmt.Errorf("cudrv: %s: %w", op, err)
}

func cStream(s cu.Stream) C.CUstream       { return *(*C.CUstream)(unsafe.Pointer(&s)) }
func cFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }

// FunctionID returns f's driver handle as a number: equal for the same kernel of the same loaded module.
func FunctionID(f cu.Function) uint64 { return uint64(uintptr(unsafe.Pointer(cFunction(f)))) }

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// Args holds kernel parameters marshalled by their real size and alignment, as the kernel's C signature
// declares them. Build one with NewArgs or reset one with Reset, append with the typed methods, pass it to Launch.
// The zero value is ready to use.
type Args struct {
	buf  [4096]byte // the most a kernel's parameters may take
	offs [64]int32
	n    int
	used int
	err  error
}

// Reset empties a for reuse.
func (a *Args) Reset() { a.n, a.used, a.err = 0, 0, nil }

func (a *Args) put(size, align int) []byte {
	if a.err != nil {
		return nil
	}
	off := (a.used + align - 1) &^ (align - 1)
	if a.n == len(a.offs) || off+size > len(a.buf) {
		a.err = fmt.Errorf("cudrv: kernel parameters exceed %d parameters or %d bytes", len(a.offs), len(a.buf))
		return nil
	}
	clear(a.buf[a.used:off]) // padding is zero, so that equal parameters give equal bytes (Raw)
	a.offs[a.n] = int32(off)
	a.n++
	a.used = off + size
	return a.buf[off : off+size]
}

// Raw returns the marshalled parameter bytes and each parameter's offset in them, or an error when appending
// failed. Equal parameter lists give equal bytes (alignment padding is zero). The slices alias a.
func (a *Args) Raw() (buf []byte, offs []int32, err error) {
	return a.buf[:a.used], a.offs[:a.n], a.err
}

// SetRaw replaces a's parameters with bytes and offsets as Raw returned them.
func (a *Args) SetRaw(buf []byte, offs []int32) error {
	if len(buf) > len(a.buf) || len(offs) > len(a.offs) {
		return fmt.Errorf("cudrv: kernel parameters exceed %d parameters or %d bytes", len(a.offs), len(a.buf))
	}
	for _, o := range offs {
		if o < 0 || int(o) > len(buf) {
			return fmt.Errorf("cudrv: parameter offset %d outside %d bytes", o, len(buf))
		}
	}
	a.used = copy(a.buf[:], buf)
	a.n = copy(a.offs[:], offs)
	a.err = nil
	return nil
}

// Ptr appends a device pointer (8 bytes).
func (a *Args) Ptr(p cu.DevicePtr) *Args { return a.U64(uint64(p)) }

// U64 appends an unsigned 64-bit integer.
func (a *Args) U64(v uint64) *Args {
	if b := a.put(8, 8); b != nil {
		*(*uint64)(unsafe.Pointer(&b[0])) = v
	}
	return a
}

// I64 appends a signed 64-bit integer.
func (a *Args) I64(v int64) *Args { return a.U64(uint64(v)) }

// I32 appends a signed 32-bit integer (C int).
func (a *Args) I32(v int32) *Args { return a.U32(uint32(v)) }

// U32 appends an unsigned 32-bit integer.
func (a *Args) U32(v uint32) *Args {
	if b := a.put(4, 4); b != nil {
		*(*uint32)(unsafe.Pointer(&b[0])) = v
	}
	return a
}

// F32 appends a float.
func (a *Args) F32(v float32) *Args { return a.U32(math.Float32bits(v)) }

// F64 appends a double.
func (a *Args) F64(v float64) *Args { return a.U64(math.Float64bits(v)) }

// Bytes appends a parameter passed by value with the given size and alignment (a struct, a CUtensorMap: 64-byte
// aligned, 128 bytes).
func (a *Args) Bytes(v []byte, align int) *Args {
	if align <= 0 || align&(align-1) != 0 || align > 64 {
		a.err = fmt.Errorf("cudrv: parameter alignment %d is not a power of two ≤ 64", align)
		return a
	}
	if b := a.put(len(v), align); b != nil {
		copy(b, v)
	}
	return a
}

// Len reports the number of parameters appended.
func (a *Args) Len() int { return a.n }

// Launch launches f on stream s with the parameters in a (cuLaunchKernel). sharedBytes is the dynamic shared
// memory; above 48 KiB it needs SetMaxDynamicShared first.
func Launch(f cu.Function, grid, block Dim3, sharedBytes int, s cu.Stream, a *Args) error {
	return launch(f, grid, block, sharedBytes, s, a, false)
}

// LaunchDependent is Launch with programmatic dependent launch (cuLaunchKernelEx,
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION; compute capability 9.0 and later): f may begin while the
// kernel before it on s is still running, once that kernel's blocks have all started or signalled
// (griddepcontrol.launch_dependents), so its launch overlaps the other's tail. f must execute griddepcontrol.wait
// before it touches memory the earlier work reads or writes.
func LaunchDependent(f cu.Function, grid, block Dim3, sharedBytes int, s cu.Stream, a *Args) error {
	return launch(f, grid, block, sharedBytes, s, a, true)
}

// launchArgs checks a launch's shape and parameters and returns the parameters as kev_launch takes them.
func launchArgs(grid, block Dim3, sharedBytes int, a *Args) (*C.char, *C.int32_t, error) {
	if a.err != nil {
		return nil, nil, a.err
	}
	for _, d := range [...]int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if d <= 0 || d > math.MaxInt32 {
			return nil, nil, fmt.Errorf("cudrv: launch dimensions grid %v block %v must be positive", grid, block)
		}
	}
	if sharedBytes < 0 {
		return nil, nil, fmt.Errorf("cudrv: negative shared memory %d", sharedBytes)
	}
	if a.n == 0 {
		return nil, nil, nil
	}
	return (*C.char)(unsafe.Pointer(&a.buf[0])), (*C.int32_t)(unsafe.Pointer(&a.offs[0])), nil
}

func launch(f cu.Function, grid, block Dim3, sharedBytes int, s cu.Stream, a *Args, pdl bool) error {
	bufp, offp, err := launchArgs(grid, block, sharedBytes, a)
	if err != nil {
		return err
	}
	if pdl {
		r := C.kev_launch_pdl(cFunction(f), C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
			C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedBytes), cStream(s),
			bufp, offp, C.int(a.n))
		return check("cuLaunchKernelEx", r)
	}
	r := C.kev_launch(cFunction(f), C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
		C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedBytes), cStream(s),
		bufp, offp, C.int(a.n))
	return check("cuLaunchKernel", r)
}

// MaxActiveClusters returns how many clusters of f (a kernel compiled with its cluster shape) the device runs at
// once with block threads and sharedBytes of dynamic shared memory per block (cuOccupancyMaxActiveClusters, for a
// grid of gridX blocks along x).
func MaxActiveClusters(f cu.Function, gridX, block, sharedBytes int) (int, error) {
	if gridX <= 0 || block <= 0 || sharedBytes < 0 {
		return 0, fmt.Errorf("cudrv: MaxActiveClusters: grid %d, block %d, shared %d", gridX, block, sharedBytes)
	}
	var n C.int
	if err := check("cuOccupancyMaxActiveClusters", C.kev_max_active_clusters(&n, cFunction(f), C.uint(gridX),
		C.uint(block), C.uint(sharedBytes))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// SetMaxDynamicShared raises f's dynamic shared-memory limit to bytes
// (cuFuncSetAttribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
func SetMaxDynamicShared(f cu.Function, bytes int) error {
	return check("cuFuncSetAttribute", C.cuFuncSetAttribute(cFunction(f),
		C.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, C.int(bytes)))
}

// CaptureMode is a stream-capture mode (CUstreamCaptureMode).
type CaptureMode int

// Capture modes: see cuStreamBeginCapture.
const (
	CaptureGlobal      CaptureMode = C.CU_STREAM_CAPTURE_MODE_GLOBAL
	CaptureThreadLocal CaptureMode = C.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	CaptureRelaxed     CaptureMode = C.CU_STREAM_CAPTURE_MODE_RELAXED
)

// BeginCapture starts capturing the work issued to s into a graph (cuStreamBeginCapture). s must not be the
// legacy default stream.
func BeginCapture(s cu.Stream, mode CaptureMode) error {
	return check("cuStreamBeginCapture", C.cuStreamBeginCapture(cStream(s), C.CUstreamCaptureMode(mode)))
}

// Graph is a captured (not yet executable) CUDA graph.
type Graph struct{ g C.CUgraph }

// EndCapture ends the capture started by BeginCapture and returns the graph (cuStreamEndCapture).
func EndCapture(s cu.Stream) (Graph, error) {
	var g C.CUgraph
	err := check("cuStreamEndCapture", C.cuStreamEndCapture(cStream(s), &g))
	return Graph{g}, err
}

// Instantiate makes an executable graph from g (cuGraphInstantiateWithFlags, flags 0).
func (g Graph) Instantiate() (GraphExec, error) {
	var e C.CUgraphExec
	err := check("cuGraphInstantiateWithFlags", C.cuGraphInstantiateWithFlags(&e, g.g, 0))
	return GraphExec{e}, err
}

// Destroy frees g (cuGraphDestroy). An instantiated GraphExec stays valid.
func (g Graph) Destroy() error { return check("cuGraphDestroy", C.cuGraphDestroy(g.g)) }

// GraphExec is an executable CUDA graph.
type GraphExec struct{ e C.CUgraphExec }

// Launch enqueues the whole graph on s (cuGraphLaunch).
func (e GraphExec) Launch(s cu.Stream) error {
	return check("cuGraphLaunch", C.cuGraphLaunch(e.e, cStream(s)))
}

// Destroy frees e (cuGraphExecDestroy).
func (e GraphExec) Destroy() error { return check("cuGraphExecDestroy", C.cuGraphExecDestroy(e.e)) }

// GraphNode is a node of a Graph; it names the matching node of the executable graphs instantiated from it.
type GraphNode struct{ n C.CUgraphNode }

// Chain returns g's nodes in order when g is one chain, as stream capture makes of work issued to one stream: a
// single root and each node followed by at most one other; an error otherwise, or past max nodes.
func (g Graph) Chain(max int) ([]GraphNode, error) {
	if max <= 0 {
		return nil, nil
	}
	raw := make([]C.CUgraphNode, max)
	var n C.size_t
	if err := check("cuGraphNodeGetDependentNodes_v2", C.kev_graph_chain(g.g, &raw[0], C.size_t(max), &n)); err != nil {
		return nil, fmt.Errorf("cudrv: graph is not one chain of at most %d nodes: %w", max, err)
	}
	nodes := make([]GraphNode, int(n))
	for i := range nodes {
		nodes[i] = GraphNode{raw[i]}
	}
	return nodes, nil
}

// SetKernel makes kernel node nd of e launch f with the shape and parameters given from its next launch on
// (cuGraphExecKernelNodeSetParams): the work Launch would issue. nd is the node of the graph e was made from.
func (e GraphExec) SetKernel(nd GraphNode, f cu.Function, grid, block Dim3, sharedBytes int, a *Args) error {
	bufp, offp, err := launchArgs(grid, block, sharedBytes, a)
	if err != nil {
		return err
	}
	return check("cuGraphExecKernelNodeSetParams", C.kev_exec_kernel(e.e, nd.n, cFunction(f), C.uint(grid.X), C.uint(grid.Y),
		C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedBytes), bufp, offp, C.int(a.n)))
}

// SetCopy makes copy node nd of e copy n bytes from src to dst from its next launch on
// (cuGraphExecMemcpyNodeSetParams; the memory must be device memory of the same context as before).
func (e GraphExec) SetCopy(nd GraphNode, dst, src cu.DevicePtr, n int64) error {
	if n <= 0 {
		return fmt.Errorf("cudrv: copy of %d bytes", n)
	}
	return check("cuGraphExecMemcpyNodeSetParams", C.kev_exec_copy(e.e, nd.n, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)))
}

// SetMemset makes fill node nd of e fill n elements at dst with v from its next launch on
// (cuGraphExecMemsetNodeSetParams; the element size stays the node's).
func (e GraphExec) SetMemset(nd GraphNode, dst cu.DevicePtr, v uint32, n int64) error {
	if n <= 0 {
		return fmt.Errorf("cudrv: fill of %d elements", n)
	}
	return check("cuGraphExecMemsetNodeSetParams", C.kev_exec_memset(e.e, nd.n, C.CUdeviceptr(dst), C.uint(v), C.size_t(n)))
}

// HostAlloc allocates n bytes of page-locked host memory that the device can copy at full speed
// (cuMemHostAlloc, portable). Free it with HostFree. The slice aliases C memory: never append to it.
func HostAlloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cudrv: HostAlloc of %d bytes", n)
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.cuMemHostAlloc(&p, C.size_t(n), C.CU_MEMHOSTALLOC_PORTABLE)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// HostFree frees memory from HostAlloc (cuMemFreeHost).
func HostFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return check("cuMemFreeHost", C.cuMemFreeHost(unsafe.Pointer(&b[0])))
}

// DriverVersion returns the driver's CUDA version, e.g. 13000 for 13.0 (cuDriverGetVersion).
func DriverVersion() (int, error) {
	var v C.int
	err := check("cuDriverGetVersion", C.cuDriverGetVersion(&v))
	return int(v), err
}

// SharedOptin returns the most dynamic shared memory one block on dev may use after SetMaxDynamicShared
// (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
func SharedOptin(dev cu.Device) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.cuDeviceGetAttribute(&v,
		C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, C.CUdevice(dev)))
	return int(v), err
}
