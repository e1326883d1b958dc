//go:build cuda

package cuda

import (
	"embed"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

//go:embed kernels/*.ptx kernels/*.cubin
var ptxFS embed.FS

// Device is one GPU: its context (owned by a locked goroutine), a stream, and the kernels loaded so far.
type Device struct {
	drv  *cudrv.Device
	info cudrv.Info
	q    Queue

	mods   map[string]cu.Module
	fns    map[fnKey]cu.Function
	shared map[fnKey]int                    // dynamic shared-memory limit raised so far, per kernel
	maps   map[cudrv.Tile2D]cudrv.TensorMap // encoded tensor maps (a pure function of their description)

	ws        Buffer              // split-K partial sums
	cnt       Buffer              // split-K tile counters (maxGEMMTiles uint32, zero between GEMMs)
	stage     []byte              // pinned staging ring for small uploads (allocated on first use), two halves
	stageAt   int                 // next free offset in stage
	stageHalf int                 // the half stageAt is in
	stageEv   [2]cu.Event         // recorded on the stream when the ring leaves half i
	stageOK   [2]bool             // stageEv[i] has been recorded
	ring      [ringSlots][]byte   // page-locked buffers for large uploads (allocated on first use)
	ringEv    [ringSlots]cu.Event // recorded after the copy out of ring[i]
	ringUsed  [ringSlots]bool     // ringEv[i] has been recorded
	ringNext  int                 // the ring buffer the next slice goes through
	closeMu   sync.Mutex
	closed    bool

	// pdl: kernels are launched as programmatic dependents of the one before them (compute capability 9.0, where
	// every module is built from compute_90 PTX whose kernels begin with griddepcontrol.wait; kernels/pdl.cuh).
	// KEV_CUDA_PDL=off turns it off.
	pdl bool
	// fp8MC: FP8 products of more than one row tile run on the cluster kernels (fp8Cluster) with KEV_CUDA_FP8_MC=on;
	// off by default: measured no faster than single blocks, and slower on the down projection (the design log v41).
	fp8MC bool
	// fp8XC: FP8 products whose tiles fill at most one round of the multiprocessors run on the X-sharing cluster
	// kernels (fp8XCluster: two blocks on neighbouring column tiles share each X tile) with KEV_CUDA_FP8_XC=on; off
	// until measured (the design log v48). The same bits either way.
	fp8XC bool
	// fp8Persist: FP8 products of more tiles than multiprocessors run on the persistent kernels (fp8Persistent),
	// 2–8 % faster than one tile a block from 240 rows up (the design log v42); KEV_CUDA_FP8_PERSIST=off runs one
	// tile a block. With fp8MC too, on the persistent cluster kernels (v43; slower).
	fp8Persist bool
	// fp8Half: FP8 products of at most 64 rows run on the half-column kernels (fp8Half: each tile's columns split
	// between its two consumer warpgroups, where one tile-row would leave the second idle), with KEV_CUDA_FP8_HALF=on;
	// off by default: 4–13 % faster products at the same width, no faster in a pass (the design log v45). The same
	// bits either way.
	fp8Half bool
	// fp8Promo: the FP8 products' promotion interval, the k tiles (128 codes each) whose products the tensor cores
	// sum before each is added to the fp32 total (FP8_PROMO_SHIFT in kernels/fp8_sm90a.cu): all of K (fp8PromoMax)
	// unless KEV_CUDA_FP8_PROMOTE says otherwise (parseFP8Promote; 1 adds every k tile's products in fp32, as
	// DeepSeek-V3's training kernels do). Longer intervals wait for the products less often and keep fewer bits of
	// the sums (the design log v46).
	fp8Promo int
	// fp8Wide: with fp8Promo at fp8PromoMax, FP8 products with enough tiles (fp8Wide) run on the FAST kernels this
	// many columns wide (fp8FastWidths): 256, or KEV_CUDA_FP8_WIDE=192, or none with KEV_CUDA_FP8_WIDE=off.
	fp8Wide int
	// fp8Pipe: FP8 products summed over all of K run the k loop that keeps one k tile's products in flight across
	// iterations (FP8_PIPE; the design log v47), with KEV_CUDA_FP8_PIPE=on; off until measured. The same bits.
	fp8Pipe bool
	// graphPDL: recorded work (eager or captured into a pass graph) is launched as pdl says, unless
	// KEV_CUDA_GRAPH_PDL=off launches it plainly.
	graphPDL bool
	// fp8Fuse: on a backend with FP8 weights, the normalisations whose outputs FP8 products read also write their
	// E4M3 codes, which the products then read instead of quantizing x (fp8_fuse.go). KEV_CUDA_FP8_FUSE=off turns
	// it off: every FP8 product quantizes its x, as before (the same bits either way).
	fp8Fuse bool

	clusters map[clusterKey]int // maxClusters' answers

	launches, syncs, staged, direct, stalls, encoded, reused atomic.Int64
	sass, jit, ringed                                        atomic.Int64 // modules loaded from machine code / from PTX; ring uploads

	// Pass graphs (graphs.go): owned by the device goroutine, except the published counters.
	graphMax    int                     // graphs kept at most; 0: passes are issued eagerly
	graphs      *graphCache[*passGraph] // kept graphs by record shape
	rec         passRecord              // the work recorded since the last flush
	recFns      []recFn                 // the kernels of rec's launches
	issueArgs   cudrv.Args              // parameters of a recorded launch being issued
	dstage      Buffer                  // device staging buffer for a record's uploads
	recErr      error                   // a flush error not yet reported
	replays     int                     // records launched as graphs
	eagerPasses int                     // records issued eagerly
	updated     int                     // graph nodes set to a replayed record's parameters
	graphErr    string                  // why the last capture failed or graph was dropped
	gmu         sync.Mutex              // guards gcounts and gon
	gcounts     GraphCounts
	gon         bool

	prof *launchProfile // set while a launch profile runs (benchmarks)
	plog *passLog       // KEV_CUDA_PASS_LOG: when each Run's waits began on the host and the device (passlog.go)
	byM  bool           // plan GEMMs from M as well, not batch-invariant (benchmarks: what invariance costs)
	gn   int            // > 0: every wgmma GEMM's tile order in groups of gn n-tiles (benchmarks; 1: m-fastest)
}

// fnKey names a kernel: module and function.
type fnKey struct{ mod, name string }

// clusterKey is a cluster kernel launched with shared bytes of dynamic shared memory a block (Device.maxClusters).
type clusterKey struct {
	fn     fnKey
	shared int
}

// Stats counts what a Device has done since it was opened: hand-overs to the goroutine that owns the context and
// calls made on it directly (see Run), kernel launches (uploads sent as launches among them: uploadWords), waits for
// the stream (Sync, Download, large uploads), small uploads staged and copied asynchronously, larger ones copied
// synchronously, waits of the staging ring for a copy still queued, GEMM tensor maps encoded by the driver or
// reused, and (from Backend.Stats) the memory pool's allocations from the driver.
type Stats struct {
	Hops, Inline    int64
	Launches, Syncs int64
	Staged, Direct  int64
	StageStalls     int64
	MapsEncoded     int64
	MapsReused      int64
	DriverAllocs    int64
	ModulesSASS     int64 // kernel modules loaded from embedded machine code
	ModulesJIT      int64 // kernel modules the driver compiled from PTX
	RingUploads     int64 // large uploads through the page-locked ring
}

// Stats returns the counters so far. Safe on any goroutine.
func (d *Device) Stats() Stats {
	ds := d.drv.Stats()
	return Stats{Hops: ds.Hops, Inline: ds.Inline, Launches: d.launches.Load(), Syncs: d.syncs.Load(),
		Staged: d.staged.Load(), Direct: d.direct.Load(), StageStalls: d.stalls.Load(),
		MapsEncoded: d.encoded.Load(), MapsReused: d.reused.Load(), ModulesSASS: d.sass.Load(), ModulesJIT: d.jit.Load(), RingUploads: d.ringed.Load()}
}

// Queue issues work to a Device's stream. It is valid only inside the Device.Do call that handed it out; its
// methods enqueue asynchronously unless they say otherwise.
type Queue struct {
	d    *Device
	s    cu.Stream
	args cudrv.Args
	tag  string // appended to the kernel's name in a launch profile (GEMM shapes)
	rec  bool   // recording a pass (graphs.go): work is recorded, issued at the next flush

	opDepth int // Backend operations running while recording

	words [4 * 1008]byte // the parameters of an upload by launch (uploadWords)
}

// Buffer is a span of device memory.
type Buffer struct {
	Ptr   cu.DevicePtr
	Bytes int64
}

// Open creates a context and a stream on GPU ordinal, loads every kernel module (LoadModules) and allocates the
// staging ring for small uploads. It fails on GPUs older than compute capability 8.0.
func Open(ordinal int) (*Device, error) {
	drv, err := cudrv.Open(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, mods: map[string]cu.Module{}, fns: map[fnKey]cu.Function{}, shared: map[fnKey]int{},
		maps: map[cudrv.Tile2D]cudrv.TensorMap{}}
	d.q.d = d
	if d.graphMax, err = graphsFromEnv(); err != nil {
		drv.Close()
		return nil, err
	}
	d.publishGraphs()
	err = drv.Do(func() error {
		var err error
		if d.info, err = drv.Info(); err != nil {
			return err
		}
		if d.info.Major < 8 {
			return fmt.Errorf("cuda: %s has compute capability %d.%d, need 8.0 or newer", d.info.Name, d.info.Major, d.info.Minor)
		}
		d.q.s, err = cu.MakeStream(cu.NonBlocking)
		return cudrv.Wrap("cuStreamCreate", err)
	})
	if err != nil {
		drv.Close()
		return nil, err
	}
	d.pdl = d.hopper() && !envIs("KEV_CUDA_PDL", "off")
	d.graphPDL = d.pdl && !envIs("KEV_CUDA_GRAPH_PDL", "off")
	d.fp8Fuse = !envIs("KEV_CUDA_FP8_FUSE", "off")
	d.fp8Half = envIs("KEV_CUDA_FP8_HALF", "on")
	d.fp8Pipe = envIs("KEV_CUDA_FP8_PIPE", "on")
	if d.fp8Promo, err = parseFP8Promote(os.Getenv("KEV_CUDA_FP8_PROMOTE")); err != nil {
		drv.Close()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if d.fp8Wide, err = parseFP8Wide(os.Getenv("KEV_CUDA_FP8_WIDE")); err != nil {
		drv.Close()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	d.fp8MC = envIs("KEV_CUDA_FP8_MC", "on")
	d.fp8XC = envIs("KEV_CUDA_FP8_XC", "on")
	d.fp8Persist = !envIs("KEV_CUDA_FP8_PERSIST", "off")
	if err := d.LoadModules(); err != nil {
		d.Close()
		return nil, err
	}
	// The staging ring for small uploads too, so that the first request does not allocate it.
	if err := d.Do(func(q *Queue) error { _, _, err := q.stageAlloc(0); return err }); err != nil {
		d.Close()
		return nil, err
	}
	if d.plog, err = passLogFromEnv(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Info describes the GPU.
func (d *Device) Info() cudrv.Info { return d.info }

// Do runs f on the goroutine that owns the context, with the Device's queue. Calls are serialised; a Do made
// inside Do or Run runs f at once.
func (d *Device) Do(f func(q *Queue) error) error {
	return d.drv.Do(func() error { return f(&d.q) })
}

// Run runs f on the goroutine that owns the context. Every Do (every Backend operation) that f makes runs at
// once on that goroutine instead of being handed over to it: wrap a whole model pass in one Run. f must not wait
// for other goroutines that use the device (they wait for f) nor call runtime.Goexit; a panic in f comes back as
// an error. While pass graphs are on (SetGraphs), the work f queues is recorded and replayed as a CUDA graph
// where the same work was seen before (see graphs.go); a Run inside Run is part of the outer one.
func (d *Device) Run(f func() error) error {
	return d.drv.Do(func() error {
		if d.q.rec || d.graphMax == 0 || d.prof != nil {
			if d.plog != nil && !d.plog.active && !d.q.rec && d.prof == nil {
				return d.plog.run(&d.q, f)
			}
			return f()
		}
		return d.runRecorded(f)
	})
}

// Close waits for queued work, frees the workspace and destroys the context.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.drv.Do(func() error {
		err := cudrv.Wrap("cuStreamSynchronize", d.q.s.Synchronize())
		d.closeGraphs()
		if d.ws.Ptr != 0 {
			cu.MemFree(d.ws.Ptr)
		}
		if d.cnt.Ptr != 0 {
			cu.MemFree(d.cnt.Ptr)
		}
		d.freeRing()
		if d.stage != nil {
			cudrv.HostFree(d.stage)
			d.stage = nil
			for i := range d.stageEv {
				cu.DestroyEvent(&d.stageEv[i])
			}
		}
		d.q.s.Destroy()
		if d.plog != nil {
			if cerr := d.plog.close(); err == nil {
				err = cerr
			}
		}
		return err
	})
	d.drv.Close()
	return err
}

// function returns kernel name of module mod ("gemm" loads kernels/gemm.sm80.ptx), loading the module on first
// use. shared > 48 KiB raises the kernel's dynamic shared-memory limit.
func (d *Device) function(mod, name string, shared int) (cu.Function, error) {
	key := fnKey{mod, name}
	if f, ok := d.fns[key]; ok && shared <= max(48<<10, d.shared[key]) {
		return f, nil
	}
	m, ok := d.mods[mod]
	if f, ok := d.fns[key]; ok { // loaded, but asked for more shared memory than allowed so far
		return f, d.raiseShared(key, f, shared)
	}
	if !ok {
		var err error
		if m, err = d.loadModule(mod); err != nil {
			return cu.Function{}, err
		}
	}
	f, err := m.Function(name)
	if err != nil {
		return cu.Function{}, cudrv.Wrap("cuModuleGetFunction "+mod+"."+name, err)
	}
	if err := d.raiseShared(key, f, shared); err != nil {
		return cu.Function{}, err
	}
	d.fns[key] = f
	return f, nil
}

// maxClusters returns how many clusters of kernel name of module mod (compiled with its cluster shape) run at once
// with block threads and shared bytes of dynamic shared memory a block (at least 1), asked of the driver once per
// kernel and shared size.
func (d *Device) maxClusters(mod, name string, block, shared int) (int, error) {
	k := clusterKey{fnKey{mod, name}, shared}
	if n, ok := d.clusters[k]; ok {
		return n, nil
	}
	f, err := d.function(mod, name, shared)
	if err != nil {
		return 0, err
	}
	n, err := cudrv.MaxActiveClusters(f, 2*d.sms(), block, shared)
	if err != nil {
		return 0, fmt.Errorf("%s.%s: %w", mod, name, err)
	}
	if n < 1 {
		return 0, fmt.Errorf("%s.%s: no cluster of its blocks fits the device (%d threads, %d bytes of shared memory a block)", mod, name, block, shared)
	}
	if d.clusters == nil {
		d.clusters = map[clusterKey]int{}
	}
	d.clusters[k] = n
	return n, nil
}

// loadModule loads module mod ("gemm": kernels/gemm.sm80.*, or kernels/gemm.sm90.* on compute capability 9.0) into
// the context: the machine code (cubin) built for this GPU's architecture when there is one, so that nothing is
// compiled at run time, else the PTX, which the driver compiles now.
func (d *Device) loadModule(mod string) (cu.Module, error) {
	if m, ok := d.mods[mod]; ok {
		return m, nil
	}
	target := "sm80"
	if d.hopper() {
		target = "sm90" // compute_90 PTX: the kernels wait for the grids they depend on (programmatic dependent launch)
	}
	if strings.HasSuffix(mod, "_sm90a") {
		if !d.hopper() {
			return cu.Module{}, fmt.Errorf("cuda: module %s needs compute capability 9.0, have %d.%d", mod, d.info.Major, d.info.Minor)
		}
		target = "sm90a"
	}
	stem := "kernels/" + mod + "." + target
	var m cu.Module
	var err error
	if cubin, ok := d.cubin(stem); ok {
		if m, err = cu.LoadData(string(cubin)); err == nil {
			d.mods[mod] = m
			d.sass.Add(1)
			return m, nil
		}
	}
	ptx, err := ptxFS.ReadFile(stem + ".ptx")
	if err != nil {
		return cu.Module{}, fmt.Errorf("cuda: kernel module %s: %w", mod, err)
	}
	if m, err = cu.LoadData(string(ptx)); err != nil {
		return cu.Module{}, cudrv.Wrap("cuModuleLoadData "+stem+".ptx", err)
	}
	d.mods[mod] = m
	d.jit.Add(1)
	return m, nil
}

// cubin returns the embedded machine code of the module file stem for this GPU: sm_90a for the Hopper-only
// modules, sm_90 for the compute_90 PTX (compute capability 9.0), sm_80 for the compute_80 PTX on 8.x.
func (d *Device) cubin(stem string) ([]byte, bool) {
	var arch string
	switch {
	case strings.HasSuffix(stem, ".sm90a"):
		arch = "sm_90a"
	case strings.HasSuffix(stem, ".sm90"):
		arch = "sm_90"
	case d.info.Major == 8:
		arch = "sm_80"
	default:
		return nil, false
	}
	b, err := ptxFS.ReadFile(stem + "." + arch + ".cubin")
	return b, err == nil
}

// Modules lists the kernel modules embedded in the package ("attn", "gemm_sm90a", ...).
func Modules() []string {
	ents, _ := ptxFS.ReadDir("kernels")
	var mods []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".ptx"); ok {
			if mod := name[:strings.IndexByte(name, '.')]; !slices.Contains(mods, mod) {
				mods = append(mods, mod) // one entry for NAME.sm80.ptx and NAME.sm90.ptx
			}
		}
	}
	return mods
}

// LoadModules loads every kernel module this GPU can run (the Hopper-only ones only on compute capability 9.0), so
// that no pass pays for loading or compiling one later. Open calls it.
func (d *Device) LoadModules() error {
	return d.Do(func(*Queue) error {
		for _, mod := range Modules() {
			if strings.HasSuffix(mod, "_sm90a") && !d.hopper() {
				continue
			}
			if _, err := d.loadModule(mod); err != nil {
				return err
			}
		}
		return nil
	})
}

// raiseShared lets kernel key (function f) use shared bytes of dynamic shared memory when that is above 48 KiB.
func (d *Device) raiseShared(key fnKey, f cu.Function, shared int) error {
	if shared <= 48<<10 || shared <= d.shared[key] {
		return nil
	}
	if shared > d.info.SharedOptin {
		return fmt.Errorf("cuda: %s.%s needs %d bytes of shared memory, the device allows %d", key.mod, key.name, shared, d.info.SharedOptin)
	}
	if err := cudrv.SetMaxDynamicShared(f, shared); err != nil {
		return err
	}
	d.shared[key] = shared
	return nil
}

// launch runs kernel mod.name with the parameters q.args holds.
func (q *Queue) launch(mod, name string, grid, block cudrv.Dim3, shared int) error {
	f, err := q.d.function(mod, name, shared)
	if err != nil {
		return err
	}
	if q.recording() {
		if err := q.recordLaunch(fnKey{mod, name}, f, grid, block, shared); err != nil {
			return err
		}
		q.d.launches.Add(1)
		return nil
	}
	launch := cudrv.Launch
	if q.d.pdl {
		launch = cudrv.LaunchDependent
	}
	if err := launch(f, grid, block, shared, q.s, &q.args); err != nil {
		return fmt.Errorf("cuda: %s.%s grid %v block %v: %w", mod, name, grid, block, err)
	}
	q.d.launches.Add(1)
	if q.d.prof != nil {
		q.d.prof.mark(q.s, mod+"."+name+q.tag)
	}
	if q.d.plog != nil && q.d.plog.perLaunch {
		q.d.plog.mark(q.s, mod+"."+name+q.tag)
	}
	return nil
}

// tensorMap returns t encoded, from the cache when the same description was encoded before (at most
// maxTensorMaps are kept; the cache starts over when full).
func (d *Device) tensorMap(t cudrv.Tile2D) (cudrv.TensorMap, error) {
	if m, ok := d.maps[t]; ok {
		d.reused.Add(1)
		return m, nil
	}
	m, err := cudrv.EncodeTiled2D(t)
	if err != nil {
		return m, err
	}
	if len(d.maps) >= maxTensorMaps {
		clear(d.maps)
	}
	d.maps[t] = m
	d.encoded.Add(1)
	return m, nil
}

// maxTensorMaps bounds the tensor-map cache (128 bytes each).
const maxTensorMaps = 4096

// Stream returns the queue's stream, for use with gorgonia.org/cu and cudrv (events, capture). Work recorded for
// a pass graph is issued first (an error doing so comes back from the next Sync or the end of Run).
func (q *Queue) Stream() cu.Stream {
	if err := q.flush(); err != nil && q.d.recErr == nil {
		q.d.recErr = err
	}
	return q.s
}

// Device returns the queue's device.
func (q *Queue) Device() *Device { return q.d }

// Sync waits until all queued work has finished and reports the first asynchronous error.
func (q *Queue) Sync() error {
	if err := q.flush(); err != nil {
		return err
	}
	if err := q.takeErr(); err != nil {
		return err
	}
	q.d.syncs.Add(1)
	if q.d.plog != nil {
		q.d.plog.mark(q.s, "")
	}
	return cudrv.Wrap("cuStreamSynchronize", q.s.Synchronize())
}

// Alloc allocates n bytes of device memory (synchronous; not allowed during stream capture).
func (q *Queue) Alloc(n int64) (Buffer, error) {
	if n <= 0 {
		return Buffer{}, fmt.Errorf("cuda: Alloc of %d bytes", n)
	}
	p, err := cu.MemAlloc(n)
	if err != nil {
		return Buffer{}, cudrv.Wrap(fmt.Sprintf("cuMemAlloc(%d)", n), err)
	}
	return Buffer{p, n}, nil
}

// Free releases b; freeing a zero Buffer does nothing.
func (q *Queue) Free(b Buffer) error {
	if b.Ptr == 0 {
		return nil
	}
	if err := q.flush(); err != nil { // recorded work may use b
		return err
	}
	return cudrv.Wrap("cuMemFree", cu.MemFree(b.Ptr))
}

// Staging ring for small uploads: index arrays go through page-locked memory with an asynchronous copy, so
// that an operation's upload does not wait for the work queued before it.
const (
	stageBytes = 4 << 20  // ring size: two halves of 2 MiB
	stageMax   = 64 << 10 // largest upload that goes through the ring
)

// stageAlloc returns the offset of n ≤ stageMax free bytes in the staging ring (allocating the ring on first
// use; ok false when page-locked memory is not available). The ring has two halves: when it moves into one
// half, it records an event after the copies staged in the other, and waits for the event recorded when it last
// left the half it enters, so no staged bytes are overwritten before their copy ran, and the stream is waited
// for only when the copies are more than a half (2 MiB of uploads) behind.
func (q *Queue) stageAlloc(n int) (at int, ok bool, err error) {
	d := q.d
	if d.stage == nil {
		b, err := cudrv.HostAlloc(stageBytes)
		if err != nil {
			return 0, false, nil
		}
		for i := range d.stageEv {
			if d.stageEv[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
				for j := 0; j < i; j++ {
					cu.DestroyEvent(&d.stageEv[j])
				}
				cudrv.HostFree(b)
				return 0, false, cudrv.Wrap("cuEventCreate", err)
			}
		}
		d.stage, d.stageAt, d.stageHalf, d.stageOK = b, 0, 0, [2]bool{}
	}
	half := len(d.stage) / 2
	cur := d.stageHalf
	at = d.stageAt
	if at+n > (cur+1)*half { // does not fit in the current half: move into the other one
		enter := 1 - cur
		if err := d.stageEv[cur].Record(q.s); err != nil {
			return 0, false, cudrv.Wrap("cuEventRecord", err)
		}
		d.stageOK[cur] = true
		if d.stageOK[enter] && d.stageEv[enter].Query() != nil {
			d.stalls.Add(1)
			if err := d.stageEv[enter].Synchronize(); err != nil {
				return 0, false, cudrv.Wrap("cuEventSynchronize", err)
			}
		}
		d.stageHalf, at = enter, enter*half
	}
	d.stageAt = (at + n + 15) &^ 15
	return at, true, nil
}

// Upload copies src into dst in stream order; src may be reused as soon as Upload returns. Whole words up to
// uploadLaunchMax go as launches that carry them in their parameters (uploadWords); other copies of up to
// 64 KiB are staged in a pinned ring and copied asynchronously (see stageAlloc); larger ones go through a second
// ring of page-locked buffers in slices (see uploadLarge), and only when that ring cannot be allocated wait for the
// queued work and copy synchronously from pageable memory.
func (q *Queue) Upload(dst Buffer, src []byte) error {
	if uploadTrace != nil {
		uploadTrace(len(src))
	}
	if int64(len(src)) > dst.Bytes {
		return fmt.Errorf("cuda: Upload of %d bytes into a %d-byte buffer", len(src), dst.Bytes)
	}
	if len(src) == 0 {
		return nil
	}
	d := q.d
	if q.recording() {
		off, ok, err := q.stage(src)
		if err != nil {
			return err
		}
		if ok {
			d.rec.copy(uint64(dst.Ptr), uint64(d.dstage.Ptr)+uint64(off), int64(len(src)))
			return nil
		}
		if err := q.flush(); err != nil {
			return err
		}
		q.rec = false // too large to stage: copied now, in stream order after the work recorded so far
		defer func() { q.rec = true }()
	}
	if uploadByLaunch && len(src) <= uploadLaunchMax && len(src)%4 == 0 && dst.Ptr%4 == 0 {
		return q.uploadWords(dst, src)
	}
	if len(src) <= stageMax {
		at, ok, err := q.stageAlloc(len(src))
		if err != nil {
			return err
		}
		if ok {
			copy(d.stage[at:], src)
			d.staged.Add(1)
			return cudrv.Wrap("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(dst.Ptr, unsafe.Pointer(&d.stage[at]), int64(len(src)), q.s))
		}
	}
	if ok, err := q.uploadLarge(dst, src); ok || err != nil {
		return err
	}
	d.direct.Add(1)
	if err := q.Sync(); err != nil {
		return err
	}
	return cudrv.Wrap("cuMemcpyHtoD", cu.MemcpyHtoD(dst.Ptr, unsafePtr(src), int64(len(src))))
}

// uploadTrace, when set (benchmarks), is told the size of every upload.
var uploadTrace func(n int)

// Uploads of whole words up to uploadLaunchMax bytes go as launches of upload_words (kernels/ops.cu), the words in
// the kernel's parameters, instead of copies: a copy between two launches costs the stream 3.4 µs up to 1 KiB and
// 11.5 µs above it on the H200 (BenchmarkUploadCost), a launch 0.6 µs. KEV_CUDA_SMALL_UPLOADS=copy keeps copies.
var uploadByLaunch = !envIs("KEV_CUDA_SMALL_UPLOADS", "copy")

const uploadLaunchMax = 16 << 10

// uploadWords enqueues launches of upload_words_256 or upload_words_1008 that write src (whole words) to dst, 1,008
// words a launch at most.
func (q *Queue) uploadWords(dst Buffer, src []byte) error {
	for off := 0; off < len(src); {
		n := min(len(src)-off, len(q.words))
		name, size := "upload_words_1008", len(q.words)
		if n <= 1024 {
			name, size = "upload_words_256", 1024
		}
		clear(q.words[copy(q.words[:], src[off:off+n]):size])
		q.args.Reset()
		q.args.Ptr(dst.Ptr+cu.DevicePtr(off)).I32(int32(n/4)).Bytes(q.words[:size], 4)
		if err := q.launch("ops", name, cudrv.Dim3{X: 1, Y: 1, Z: 1}, cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// The ring for large uploads (weights at load): ringSlots page-locked buffers of ringSlot bytes, each with an
// event recorded after the copy out of it.
const (
	ringSlots = 4
	ringSlot  = 16 << 20
)

// uploadLarge copies src into dst slice by slice: each slice is copied (by several goroutines when large) into the
// next buffer of the ring, once the copy queued from that buffer before has run, and then copied to the device
// asynchronously. The host never waits for the device except for a buffer's previous copy, so reading the next
// slice overlaps the transfer of the last. ok is false when the ring cannot be allocated.
func (q *Queue) uploadLarge(dst Buffer, src []byte) (ok bool, err error) {
	d := q.d
	if d.ring[0] == nil {
		for i := range d.ring {
			if d.ring[i], err = cudrv.HostAlloc(ringSlot); err != nil {
				d.freeRing()
				return false, nil
			}
			if d.ringEv[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
				cudrv.HostFree(d.ring[i])
				d.ring[i] = nil
				d.freeRing()
				return false, cudrv.Wrap("cuEventCreate", err)
			}
		}
	}
	for off := 0; off < len(src); off += ringSlot {
		n := min(ringSlot, len(src)-off)
		i := d.ringNext
		d.ringNext = (i + 1) % ringSlots
		if d.ringUsed[i] && d.ringEv[i].Query() != nil {
			d.stalls.Add(1)
			if err := d.ringEv[i].Synchronize(); err != nil {
				return true, cudrv.Wrap("cuEventSynchronize", err)
			}
		}
		parallelCopy(d.ring[i][:n], src[off:off+n])
		if err := cu.MemcpyHtoDAsync(dst.Ptr+cu.DevicePtr(off), unsafe.Pointer(&d.ring[i][0]), int64(n), q.s); err != nil {
			return true, cudrv.Wrap("cuMemcpyHtoDAsync", err)
		}
		if err := d.ringEv[i].Record(q.s); err != nil {
			return true, cudrv.Wrap("cuEventRecord", err)
		}
		d.ringUsed[i] = true
	}
	d.ringed.Add(1)
	return true, nil
}

// freeRing frees the large-upload ring's buffers and events (after the stream has finished with them).
func (d *Device) freeRing() {
	for i := range d.ring {
		if d.ring[i] != nil {
			cudrv.HostFree(d.ring[i])
			cu.DestroyEvent(&d.ringEv[i])
			d.ring[i] = nil
		}
		d.ringUsed[i] = false
	}
}

// parallelCopy copies src into dst with up to four goroutines (one for less than 4 MiB).
func parallelCopy(dst, src []byte) {
	const part = 4 << 20
	if len(src) < part {
		copy(dst, src)
		return
	}
	parts := min(4, len(src)/part)
	step := (len(src) + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < len(src); lo += step {
		hi := min(lo+step, len(src))
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}

// Download copies len(dst) bytes from src after the queued work has finished.
func (q *Queue) Download(dst []byte, src Buffer) error {
	if int64(len(dst)) > src.Bytes {
		return fmt.Errorf("cuda: Download of %d bytes from a %d-byte buffer", len(dst), src.Bytes)
	}
	if len(dst) == 0 {
		return nil
	}
	if err := q.Sync(); err != nil {
		return err
	}
	return cudrv.Wrap("cuMemcpyDtoH", cu.MemcpyDtoH(unsafePtr(dst), src.Ptr, int64(len(dst))))
}

// Memset16 fills the first n 16-bit words of b with v (asynchronously).
func (q *Queue) Memset16(b Buffer, v uint16, n int64) error {
	if 2*n > b.Bytes {
		return fmt.Errorf("cuda: Memset16 of %d words into a %d-byte buffer", n, b.Bytes)
	}
	if q.recording() {
		if n > 0 {
			q.d.rec.memset16(uint64(b.Ptr), v, n)
		}
		return nil
	}
	return cudrv.Wrap("cuMemsetD16Async", cu.MemsetD16Async(b.Ptr, v, n, q.s))
}

// ReserveWorkspace makes sure the split-K workspace holds at least n bytes and the split-K tile counters exist, so
// that no allocation happens later (for instance during stream capture).
func (q *Queue) ReserveWorkspace(n int64) error {
	d := q.d
	if d.cnt.Ptr == 0 {
		b, err := q.Alloc(4 * maxGEMMTiles)
		if err != nil {
			return err
		}
		if err := q.Memset16(b, 0, 2*maxGEMMTiles); err != nil {
			q.Free(b)
			return err
		}
		d.cnt = b
	}
	if d.ws.Bytes >= n {
		return nil
	}
	if err := q.Sync(); err != nil {
		return err
	}
	if err := q.Free(d.ws); err != nil {
		return err
	}
	d.ws = Buffer{}
	n = (n + 1<<20 - 1) &^ (1<<20 - 1)
	b, err := q.Alloc(n)
	if err != nil {
		return err
	}
	d.ws = b
	return nil
}

// envIs reports whether the environment variable name is set to value (any case, spaces around ignored): how the
// device reads its switches (KEV_CUDA_FP8_PIPE=on, KEV_CUDA_PDL=off, …).
func envIs(name, value string) bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv(name)), value)
}
