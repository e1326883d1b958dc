package checkpoint

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
)

// DefaultBudget is the host memory, in bytes, that a streaming load spends on tensors built ahead of the engine.
const DefaultBudget = 768 << 20

// StreamOptions control OpenStream.
type StreamOptions struct {
	Options
	// Budget bounds the bytes of tensors built but not yet released by the engine (0: DefaultBudget). A tensor the
	// engine asks for is always built, so one tensor larger than the budget still loads.
	Budget int64
	// Progress, when not nil, is called after each release with the bytes released so far and in all (the
	// tensors' bytes as the weights store them). It runs on the engine's goroutine; keep it short.
	Progress func(done, total int64)
}

// OpenStream opens the Kev checkpoint in kevDir as Open does (same files, same checks, same merge, bit for bit)
// but builds no tensor up front: the returned Checkpoint's Weights have an empty Tensors map and a Source that
// builds each tensor when the engine asks for it, while Workers goroutines build the next ones in LoadOrder, at
// most Budget bytes ahead. A BF16 (F16) tensor that no adapter touches, asked for as BF16 (F16) and stored so, is not
// copied: it points into the mapped file (Tensor.Mapped). The weights files stay open, and the mapped tensors
// valid, until Close.
func OpenStream(kevDir, baseDir string, opts StreamOptions) (*Checkpoint, error) {
	ck, cfg, base, adapter, err := openFiles(kevDir, baseDir, opts.Options)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Checkpoint, error) {
		base.Close()
		if adapter != nil {
			adapter.Close()
		}
		return nil, err
	}
	want, src, pairs, err := planWeights(cfg, base, adapter, ck.Adapter, opts.Options)
	if err != nil {
		return fail(err)
	}
	st := &stream{items: make(map[string]*item, len(want)), budget: opts.Budget, progress: opts.Progress,
		base: base, adapter: adapter, scale: float32(ck.Scale)}
	if st.budget <= 0 {
		st.budget = DefaultBudget
	}
	st.cond = sync.NewCond(&st.mu)
	for _, canon := range streamOrder(&cfg, want) {
		t := src[canon]
		dt := opts.dtypeOf(canon)
		it := &item{name: canon, src: t, pair: pairs[canon], dt: dt}
		it.bytes = int64(t.Len()) * 4
		if dt != qwen35.F32 {
			it.bytes = int64(t.Len()) * 2
		}
		st.total += it.bytes
		st.order = append(st.order, it)
		st.items[canon] = it
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = max(runtime.GOMAXPROCS(0), 2)
	}
	// Several goroutines per tensor, so that the cores stay busy when the budget holds fewer tensors than there
	// are workers (9B matrices are 100 MB).
	st.par = min(4, workers)
	st.wg.Add(workers)
	for range workers {
		go st.work()
	}
	ck.Weights = &qwen35.Weights{Config: cfg, Tensors: map[string]*qwen35.Tensor{}, Source: st}
	ck.closer = st
	return ck, nil
}

// Close stops a streaming checkpoint's workers and closes its weights files: tensors that point into them (Mapped)
// must not be used afterwards. Close on a checkpoint from Open does nothing.
func (ck *Checkpoint) Close() error {
	if ck == nil || ck.closer == nil {
		return nil
	}
	c := ck.closer
	ck.closer = nil
	return c.close()
}

// Bytes is the size of the weights as they are built: two bytes an element for BF16 and F16 tensors, four for F32.
func (ck *Checkpoint) Bytes() int64 {
	if ck.closer != nil {
		return ck.closer.total
	}
	var n int64
	if ck.Weights != nil {
		for _, t := range ck.Weights.Tensors {
			n += int64(len(t.F32))*4 + int64(len(t.BF16))*2 + int64(len(t.F16))*2
		}
	}
	return n
}

// LoadOrder lists the canonical names of a model's tensors in the order the engine uploads them: the embedding and
// the final norm, then layer by layer the two norms, the MLP and the mixer's tensors.
func LoadOrder(c *qwen35.Config) []string {
	names := []string{"embed_tokens.weight", "norm.weight"}
	for i, lt := range c.LayerTypes {
		p := layerName(i)
		names = append(names, p+"input_layernorm.weight", p+"post_attention_layernorm.weight",
			p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight")
		if lt == qwen35.FullAttention {
			a := p + "self_attn."
			names = append(names, a+"q_proj.weight", a+"k_proj.weight", a+"v_proj.weight", a+"q_norm.weight",
				a+"k_norm.weight", a+"o_proj.weight")
			continue
		}
		l := p + "linear_attn."
		names = append(names, l+"in_proj_qkv.weight", l+"in_proj_z.weight", l+"in_proj_b.weight",
			l+"in_proj_a.weight", l+"conv1d.weight", l+"A_log", l+"dt_bias", l+"norm.weight", l+"out_proj.weight")
	}
	return names
}

// streamOrder is the order the tensors of want are built in: LoadOrder's names that want has, with each layer's
// other tensors (the biases of an attention-only base) right after that layer's, then anything else, sorted.
func streamOrder(c *qwen35.Config, want map[string][]int) []string {
	seen := make(map[string]bool, len(want))
	rest := map[string][]string{} // layer prefix -> its tensors LoadOrder does not name
	var other []string
	known := map[string]bool{}
	for _, n := range LoadOrder(c) {
		known[n] = true
	}
	for _, n := range sortedNames(want) {
		if known[n] {
			continue
		}
		if p, ok := layerPrefix(n); ok {
			rest[p] = append(rest[p], n)
		} else {
			other = append(other, n)
		}
	}
	var names []string
	add := func(n string) {
		if _, ok := want[n]; ok && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, n := range []string{"embed_tokens.weight", "norm.weight"} {
		add(n)
	}
	for i := range c.LayerTypes {
		p := layerName(i)
		for _, n := range LoadOrder(&qwen35.Config{LayerTypes: []qwen35.LayerType{c.LayerTypes[i]}})[2:] {
			add(p + strings.TrimPrefix(n, layerName(0)))
		}
		for _, n := range rest[p] {
			add(n)
		}
	}
	for _, n := range other {
		add(n)
	}
	for _, n := range sortedNames(want) { // tensors of layers past LayerTypes, if a config ever has them
		add(n)
	}
	return names
}

// layerPrefix returns "layers.<i>." of a canonical layer tensor name.
func layerPrefix(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "layers.")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	return "layers." + rest[:i+1], true
}

// item states.
const (
	idle     = iota // not started
	building        // a worker or Fetch is building it
	built           // t (or err) is ready
	taken           // handed out by Fetch; counts against the budget until released
	released        // the engine has its own copy
)

type item struct {
	name  string
	src   *safetensors.Tensor
	pair  *loraPair
	dt    qwen35.DType
	bytes int64 // host bytes of the built tensor
	held  int64 // bytes counted against the budget (0 for mapped tensors)
	state int
	t     *qwen35.Tensor
	err   error
}

// stream is the qwen35.Source of OpenStream.
type stream struct {
	mu       sync.Mutex
	cond     *sync.Cond
	order    []*item
	items    map[string]*item
	next     int   // first item of order no worker has taken
	inflight int64 // bytes held by built, taken and building items
	budget   int64
	done     int64 // bytes released
	total    int64
	closed   bool
	progress func(done, total int64)
	wg       sync.WaitGroup

	reportMu sync.Mutex // serialises progress calls, so that done never goes back
	reported int64      // the last done passed to progress

	base    *safetensors.Checkpoint
	adapter *safetensors.File
	scale   float32
	par     int // goroutines building one tensor's row blocks
}

// errClosed is returned by Fetch after Close.
var errClosed = errors.New("checkpoint: streaming checkpoint closed")

// work builds the tensors of order, in order, within the budget.
func (s *stream) work() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for s.next < len(s.order) && s.order[s.next].state != idle {
			s.next++
		}
		if s.closed || s.next >= len(s.order) {
			return
		}
		it := s.order[s.next]
		cost := it.cost()
		if s.inflight > 0 && s.inflight+cost > s.budget {
			s.cond.Wait()
			continue
		}
		s.next++
		it.state, it.held = building, cost
		s.inflight += cost
		s.mu.Unlock()
		t, err := s.build(it)
		s.mu.Lock()
		it.t, it.err, it.state = t, err, built
		s.cond.Broadcast()
	}
}

// cost is the host memory building it takes: nothing for a tensor that points into the mapped file.
func (it *item) cost() int64 {
	if it.mapped() {
		return 0
	}
	return it.bytes
}

// mapped reports whether the built tensor can point into the file: BF16 (F16) asked and stored, no merge, 2-byte
// aligned.
func (it *item) mapped() bool {
	same := (it.dt == qwen35.BF16 && it.src.DType == safetensors.BF16) || (it.dt == qwen35.F16 && it.src.DType == safetensors.F16)
	return it.pair == nil && same && (len(it.src.Data) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(it.src.Data)))%2 == 0)
}

// build makes the tensor of it: a view of the file, a conversion or a merge.
func (s *stream) build(it *item) (*qwen35.Tensor, error) {
	if it.mapped() {
		t := &qwen35.Tensor{Shape: append([]int(nil), it.src.Shape...), DType: it.dt, Mapped: true}
		bits := []uint16{}
		if n := len(it.src.Data) / 2; n > 0 {
			bits = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(it.src.Data))), n)
		}
		if it.dt == qwen35.F16 {
			t.F16 = bits
		} else {
			t.BF16 = bits
		}
		return t, nil
	}
	out := newOutput(it.name, it.src, it.dt)
	var jobs []func() error
	if it.pair != nil {
		m, err := newMerge(it.src, it.pair, out, s.scale)
		if err != nil {
			return nil, err
		}
		jobs = m.jobs()
	} else {
		jobs = convertJobs(it.src, out)
	}
	if err := runJobs(jobs, s.par); err != nil {
		return nil, err
	}
	return out, nil
}

// Fetch returns the tensor called name: built by a worker, or built now when no worker has started it.
func (s *stream) Fetch(name string) (*qwen35.Tensor, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[name]
	if !ok {
		return nil, false, nil
	}
	for {
		if s.closed {
			return nil, true, errClosed
		}
		switch it.state {
		case idle, released:
			// Built here, outside the budget: the engine waits for nothing else.
			it.state, it.held = building, it.cost()
			s.inflight += it.held
			s.mu.Unlock()
			t, err := s.build(it)
			s.mu.Lock()
			it.t, it.err, it.state = t, err, built
			s.cond.Broadcast()
			continue
		case building:
			s.cond.Wait()
			continue
		}
		it.state = taken
		t, err := it.t, it.err
		if err != nil {
			s.releaseLocked(it)
			return nil, true, err
		}
		return t, true, nil
	}
}

// Release drops the host copy of a tensor the engine has copied.
func (s *stream) Release(name string) {
	s.mu.Lock()
	it, ok := s.items[name]
	if !ok || it.state != taken {
		s.mu.Unlock()
		return
	}
	s.releaseLocked(it)
	s.done += it.bytes
	done, total, progress := s.done, s.total, s.progress
	s.mu.Unlock()
	if progress == nil {
		return
	}
	// Releases from several goroutines reach this point in any order: report only what is newer than the last.
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	if done > s.reported {
		s.reported = done
		progress(done, total)
	}
}

func (s *stream) releaseLocked(it *item) {
	it.state, it.t, it.err = released, nil, nil
	s.inflight -= it.held
	it.held = 0
	s.cond.Broadcast()
}

// close stops the workers (after the tensor each is building) and closes the files.
func (s *stream) close() error {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	for _, it := range s.order {
		it.t = nil
	}
	s.mu.Unlock()
	err := s.base.Close()
	if s.adapter != nil {
		if aerr := s.adapter.Close(); err == nil {
			err = aerr
		}
	}
	return err
}
