package checkpoint

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/quote"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
)

// TensorError reports a tensor that is missing, unexpected, of the wrong
// shape or of an unusable dtype. File is the file holding it (or the
// directory it was expected in); Want is the expected shape, when known.
type TensorError struct {
	File   string
	Tensor string
	Shape  []int
	Want   []int
	Reason string
}

// Error describes the failure and where it happened.
func (e *TensorError) Error() string {
	s := fmt.Sprintf("checkpoint: %s: tensor %s: %s", e.File, quote.Name(e.Tensor), e.Reason)
	if e.Shape != nil {
		s += fmt.Sprintf(" (shape %s)", dims(e.Shape))
	}
	if e.Want != nil {
		s += fmt.Sprintf(" (want %s)", dims(e.Want))
	}
	return s
}

// Options control how Open builds the weights.
type Options struct {
	// DType is the weights' type: qwen35.F32 keeps everything fp32 (the
	// reference path); qwen35.BF16 (qwen35.F16) rounds matrices, embedding
	// and conv weights to bf16 (IEEE fp16) once, after the merge, while
	// KeepsF32 tensors stay fp32.
	DType qwen35.DType
	// LoRAScale multiplies the adapter's delta (nil means 1).
	LoRAScale *float64
	// Workers is the number of goroutines converting and merging; 0 means
	// GOMAXPROCS (at least 2).
	Workers int
	// ProductsF32 keeps the matrix-product weights (ProductWeight) float32
	// whatever DType is: the fp32 path's values, the adapter merged in fp32
	// and never rounded, for a backend that quantizes them itself (FP8
	// weights). The other tensors are DType as usual.
	ProductsF32 bool
}

// dtypeOf is the type the tensor with canonical name is built in.
func (o *Options) dtypeOf(canon string) qwen35.DType {
	if KeepsF32(canon) || (o.ProductsF32 && ProductWeight(canon)) {
		return qwen35.F32
	}
	return o.DType
}

// Checkpoint is a loaded Kev checkpoint.
type Checkpoint struct {
	Dir     string         // the Kev checkpoint directory
	Head    *Head          // head.pt
	Adapter *AdapterConfig // nil for full-weight checkpoints
	// Scale is the merge's effective scale s = Scaling·LoRAScale (0 when
	// there is no adapter).
	Scale   float64
	Weights *qwen35.Weights

	closer *stream // OpenStream's source, closed by Close
}

// File names inside checkpoint directories.
const (
	HeadFile          = "head.pt"
	AdapterConfigFile = "adapter_config.json"
	AdapterFile       = "adapter_model.safetensors"
	ConfigFile        = "config.json"
)

// Open loads the Kev checkpoint in kevDir. A LoRA checkpoint
// (adapter_config.json present) is merged into the base model in baseDir
// (config.json plus model*.safetensors, sharded or not); a full-weight
// checkpoint (config.json and model*.safetensors in kevDir itself, head.pt
// weights "full") ignores baseDir. head.pt's "weights" must agree with the
// files found.
func Open(kevDir, baseDir string, opts Options) (*Checkpoint, error) {
	ck, cfg, base, adapter, err := openFiles(kevDir, baseDir, opts)
	if err != nil {
		return nil, err
	}
	defer base.Close()
	if adapter != nil {
		defer adapter.Close()
	}
	ck.Weights, err = BuildWeights(cfg, base, adapter, ck.Adapter, ck.Scale, opts)
	if err != nil {
		return nil, err
	}
	return ck, nil
}

// openFiles reads head.pt, the adapter config and the config, and opens the weights files (the caller closes
// them).
func openFiles(kevDir, baseDir string, opts Options) (*Checkpoint, qwen35.Config, *safetensors.Checkpoint, *safetensors.File, error) {
	var cfg qwen35.Config
	headPath := filepath.Join(kevDir, HeadFile)
	head, err := ReadHead(headPath)
	if err != nil {
		if lerr := CheckLayout(kevDir, false); lerr != nil {
			return nil, cfg, nil, nil, lerr
		}
		return nil, cfg, nil, nil, err
	}
	if head.OptionIsolation {
		return nil, cfg, nil, nil, &ConfigError{File: headPath, Field: "option_isolation",
			Reason: "true: option-isolated encodings (each option its own sub-branch) are not supported"}
	}
	ck := &Checkpoint{Dir: kevDir, Head: head}
	adapterCfg := filepath.Join(kevDir, AdapterConfigFile)
	hasAdapter := exists(adapterCfg)
	hasFull := exists(filepath.Join(kevDir, ConfigFile)) && hasModelFiles(kevDir)
	weightsDir := baseDir
	switch {
	case hasAdapter && head.Weights != "lora":
		return nil, cfg, nil, nil, &ConfigError{File: headPath, Field: "weights", Reason: fmt.Sprintf("%q, but %s holds a LoRA adapter", head.Weights, kevDir)}
	case hasAdapter:
		if baseDir == "" {
			return nil, cfg, nil, nil, &ConfigError{File: adapterCfg, Reason: "a LoRA checkpoint needs the base model directory"}
		}
		if ck.Adapter, err = ReadAdapterConfig(adapterCfg); err != nil {
			return nil, cfg, nil, nil, err
		}
		if head.LoRA != 0 && head.LoRA != ck.Adapter.R {
			return nil, cfg, nil, nil, &ConfigError{File: headPath, Field: "lora", Reason: fmt.Sprintf("%d, but %s has r = %d", head.LoRA, adapterCfg, ck.Adapter.R)}
		}
		ck.Scale = ck.Adapter.Scaling()
		if opts.LoRAScale != nil {
			ck.Scale *= *opts.LoRAScale
		}
	case hasFull && head.Weights != "full":
		return nil, cfg, nil, nil, &ConfigError{File: headPath, Field: "weights", Reason: fmt.Sprintf("%q, but %s holds full weights and no adapter", head.Weights, kevDir)}
	case hasFull:
		weightsDir = kevDir
	default:
		return nil, cfg, nil, nil, &ConfigError{File: kevDir, Reason: fmt.Sprintf("neither %s nor %s with model*.safetensors (head.pt says weights %q): %s", AdapterConfigFile, ConfigFile, head.Weights, CheckpointLayout)}
	}

	cfg, err = LoadConfig(filepath.Join(weightsDir, ConfigFile))
	if err != nil {
		return nil, cfg, nil, nil, err
	}
	if head.Dim() != cfg.HiddenSize {
		return nil, cfg, nil, nil, &TensorError{File: headPath, Tensor: "head.q.weight", Shape: head.QWeight.Shape,
			Want: []int{head.HeadDim, cfg.HiddenSize}, Reason: "does not match the base's hidden_size"}
	}
	base, err := safetensors.OpenDir(weightsDir)
	if err != nil {
		return nil, cfg, nil, nil, err
	}
	var adapter *safetensors.File
	if ck.Adapter != nil {
		if adapter, err = safetensors.Open(filepath.Join(kevDir, AdapterFile)); err != nil {
			base.Close()
			return nil, cfg, nil, nil, err
		}
	}
	return ck, cfg, base, adapter, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func hasModelFiles(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	return len(m) > 0 || exists(filepath.Join(dir, safetensors.IndexFile))
}

// canonicalBase maps a base checkpoint name to its canonical name; skip is
// true for tensors the text model does not use (vision tower, MTP head,
// lm_head).
func canonicalBase(name string) (canon string, skip bool) {
	switch {
	case strings.HasPrefix(name, "model.visual."), strings.HasPrefix(name, "mtp."), strings.HasPrefix(name, "lm_head."):
		return "", true
	case strings.HasPrefix(name, "model.language_model."):
		return strings.TrimPrefix(name, "model.language_model."), false
	case strings.HasPrefix(name, "model."):
		return strings.TrimPrefix(name, "model."), false
	}
	return name, false
}

type loraPair struct{ a, b *safetensors.Tensor }

// BuildWeights converts the base tensors to the requested dtype and merges
// the adapter (nil for none) with scale s. Every text tensor the config
// implies must be present with its shape; any other text tensor is an
// error. The adapter's tensors must each pair up (A [r, in], B [out, r])
// on a weight the config has.
func BuildWeights(cfg qwen35.Config, base *safetensors.Checkpoint, adapter *safetensors.File, acfg *AdapterConfig, s float64, opts Options) (*qwen35.Weights, error) {
	want, src, pairs, err := planWeights(cfg, base, adapter, acfg, opts)
	if err != nil {
		return nil, err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = max(runtime.GOMAXPROCS(0), 2)
	}
	w := &qwen35.Weights{Config: cfg, Tensors: make(map[string]*qwen35.Tensor, len(want))}
	var jobs []func() error
	for _, canon := range sortedNames(want) {
		t := src[canon]
		out := newOutput(canon, t, opts.dtypeOf(canon))
		w.Tensors[canon] = out
		if p := pairs[canon]; p != nil {
			m, err := newMerge(t, p, out, float32(s))
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, m.jobs()...)
			continue
		}
		jobs = append(jobs, convertJobs(t, out)...)
	}
	if err := runJobs(jobs, workers); err != nil {
		return nil, err
	}
	return w, nil
}

// newOutput allocates the weights tensor canon built from t: dtype dt, or F32 for the tensors that stay F32.
func newOutput(canon string, t *safetensors.Tensor, dt qwen35.DType) *qwen35.Tensor {
	if KeepsF32(canon) {
		dt = qwen35.F32
	}
	out := &qwen35.Tensor{Shape: append([]int(nil), t.Shape...), DType: dt}
	n := t.Len()
	switch dt {
	case qwen35.F32:
		out.F32 = make([]float32, n)
	case qwen35.F16:
		out.F16 = make([]uint16, n)
	default:
		out.BF16 = make([]uint16, n)
	}
	return out
}

// planWeights checks the base's and the adapter's tensors against the config and pairs the LoRA factors: want is
// every tensor the config implies (canonical name → shape), src the base tensor of each, pairs the factors of each
// adapted one.
func planWeights(cfg qwen35.Config, base *safetensors.Checkpoint, adapter *safetensors.File, acfg *AdapterConfig, opts Options) (want map[string][]int, src map[string]*safetensors.Tensor, pairs map[string]*loraPair, err error) {
	if opts.DType != qwen35.F32 && opts.DType != qwen35.BF16 && opts.DType != qwen35.F16 {
		return nil, nil, nil, fmt.Errorf("checkpoint: unsupported weights dtype %s", opts.DType)
	}
	want = ExpectedShapes(&cfg)
	src = map[string]*safetensors.Tensor{}
	where := "base checkpoint"
	if len(base.Files) > 0 {
		where = filepath.Dir(base.Files[0].Path)
	}
	for _, name := range base.Names() {
		canon, skip := canonicalBase(name)
		if skip {
			continue
		}
		t, err := base.Tensor(name)
		if err != nil {
			return nil, nil, nil, err
		}
		shape, ok := want[canon]
		if !ok {
			return nil, nil, nil, &TensorError{File: t.File, Tensor: name, Shape: t.Shape, Reason: "not a tensor of this config's text model"}
		}
		if prev, dup := src[canon]; dup {
			return nil, nil, nil, &TensorError{File: t.File, Tensor: name, Reason: "same canonical name " + quote.Name(canon) + " as " + quote.Name(prev.Name)}
		}
		if !reflect.DeepEqual(t.Shape, shape) {
			return nil, nil, nil, &TensorError{File: t.File, Tensor: name, Shape: t.Shape, Want: shape, Reason: "wrong shape"}
		}
		if !t.DType.IsFloat() {
			return nil, nil, nil, &TensorError{File: t.File, Tensor: name, Reason: fmt.Sprintf("dtype %s is not a float type", t.DType)}
		}
		src[canon] = t
	}
	for _, canon := range sortedNames(want) {
		if _, ok := src[canon]; !ok {
			return nil, nil, nil, &TensorError{File: where, Tensor: canon, Want: want[canon], Reason: "missing (as model.language_model." + canon + " or model." + canon + ")"}
		}
	}

	pairs = map[string]*loraPair{}
	if adapter != nil {
		for _, name := range adapter.Names() {
			t, err := adapter.Tensor(name)
			if err != nil {
				return nil, nil, nil, err
			}
			target, factor, module, ok := adapterTarget(name)
			if !ok {
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: name, Shape: t.Shape, Reason: "not a LoRA factor (base_model.model.layers.N.<module>.lora_{A,B}.weight) of an adapted module"}
			}
			w, ok := want[target]
			if !ok {
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: name, Reason: "adapts " + quote.Name(target) + ", which this config's text model does not have"}
			}
			if !acfg.targets(module) {
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: name, Reason: fmt.Sprintf("module %s is not in target_modules %s", quote.Name(module), quote.Cut(fmt.Sprint(acfg.TargetModules), quote.MaxMessage))}
			}
			if !t.DType.IsFloat() {
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: name, Reason: fmt.Sprintf("dtype %s is not a float type", t.DType)}
			}
			p := pairs[target]
			if p == nil {
				p = &loraPair{}
				pairs[target] = p
			}
			exp := []int{acfg.R, w[1]}
			if factor == "A" {
				p.a = t
			} else {
				p.b = t
				exp = []int{w[0], acfg.R}
			}
			if !reflect.DeepEqual(t.Shape, exp) {
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: name, Shape: t.Shape, Want: exp, Reason: "wrong shape for lora_" + factor}
			}
		}
		for target, p := range pairs {
			if p.a == nil || p.b == nil {
				missing := "lora_A"
				if p.b == nil {
					missing = "lora_B"
				}
				return nil, nil, nil, &TensorError{File: adapter.Path, Tensor: target, Reason: "has one LoRA factor but no " + missing}
			}
		}
	}
	return want, src, pairs, nil
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// runJobs runs jobs on n goroutines and returns the first error.
func runJobs(jobs []func() error, n int) error {
	var (
		mu    sync.Mutex
		first error
		next  int
		wg    sync.WaitGroup
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) || first != nil {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				if err := j(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// chunk is the number of elements one conversion job handles.
const chunk = 1 << 20

// convertJobs copies t into out, converting dtypes, in chunks.
func convertJobs(t *safetensors.Tensor, out *qwen35.Tensor) []func() error {
	n := t.Len()
	var jobs []func() error
	for lo := 0; lo < n || (n == 0 && lo == 0); lo += chunk {
		hi := min(lo+chunk, n)
		jobs = append(jobs, func() error { return convertRange(t, out, lo, hi) })
		if n == 0 {
			break
		}
	}
	return jobs
}

// convertRange converts elements [lo, hi) of t into out.
func convertRange(t *safetensors.Tensor, out *qwen35.Tensor, lo, hi int) error {
	size := t.DType.Size()
	view := safetensors.Tensor{Name: t.Name, File: t.File, DType: t.DType, Shape: []int{hi - lo}, Data: t.Data[lo*size : hi*size]}
	if out.DType == qwen35.F32 {
		return view.Float32Into(out.F32[lo:hi])
	}
	if out.DType == qwen35.F16 {
		return convert16(view, safetensors.F16, out.F16[lo:hi], half.F16FromF32)
	}
	return convert16(view, safetensors.BF16, out.BF16[lo:hi], half.BF16FromF32)
}

// convert16 fills dst, a 16-bit tensor's elements, from view: the bytes as they are when the file stores the same
// type (as), or else each element widened to float32 and rounded once by round.
func convert16(view safetensors.Tensor, as safetensors.DType, dst []uint16, round func(float32) uint16) error {
	if view.DType == as {
		b := view.Data
		for i := range dst {
			dst[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
		}
		return nil
	}
	tmp := make([]float32, len(dst))
	if err := view.Float32Into(tmp); err != nil {
		return err
	}
	for i, v := range tmp {
		dst[i] = round(v)
	}
	return nil
}

// loraAccGo sets acc[i] = Σ_k b[k]·a[k·in+i] for the columns i ≥ lo, in k
// order with one fused multiply-add per step, rounded to fp32 after each:
// b·a is exact in float64, so float32(b·a + x) computed in float64 is the fp32
// FMA.
func loraAccGo(acc []float32, a []float64, b []float64, in, lo int) {
	acc = acc[lo:in]
	clear(acc)
	r := len(b)
	k := 0
	for ; k+4 <= r; k += 4 {
		b0, b1, b2, b3 := b[k], b[k+1], b[k+2], b[k+3]
		a0 := a[k*in+lo : (k+1)*in]
		a1 := a[(k+1)*in+lo : (k+2)*in][:len(a0)]
		a2 := a[(k+2)*in+lo : (k+3)*in][:len(a0)]
		a3 := a[(k+3)*in+lo : (k+4)*in][:len(a0)]
		acc := acc[:len(a0)]
		for i := range a0 {
			x := float32(b0*a0[i] + float64(acc[i]))
			x = float32(b1*a1[i] + float64(x))
			x = float32(b2*a2[i] + float64(x))
			acc[i] = float32(b3*a3[i] + float64(x))
		}
	}
	for ; k < r; k++ {
		ak := a[k*in+lo : (k+1)*in]
		for i := range acc {
			acc[i] = float32(b[k]*ak[i] + float64(acc[i]))
		}
	}
}

// merge computes out = W + s·(B@A) for one weight, row block by row block.
type merge struct {
	w        *safetensors.Tensor
	out      *qwen35.Tensor
	a64      []float64 // A [r, in], widened once
	b        []float32 // B [out, r]
	s        float32
	rows, in int
	r        int
}

func newMerge(w *safetensors.Tensor, p *loraPair, out *qwen35.Tensor, s float32) (*merge, error) {
	a, err := p.a.Float32()
	if err != nil {
		return nil, err
	}
	b, err := p.b.Float32()
	if err != nil {
		return nil, err
	}
	for i, v := range a {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, &TensorError{File: p.a.File, Tensor: p.a.Name, Reason: fmt.Sprintf("element %d is %v", i, v)}
		}
	}
	for i, v := range b {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, &TensorError{File: p.b.File, Tensor: p.b.Name, Reason: fmt.Sprintf("element %d is %v", i, v)}
		}
	}
	m := &merge{w: w, out: out, b: b, s: s, rows: w.Shape[0], in: w.Shape[1], r: p.a.Shape[0]}
	m.a64 = make([]float64, len(a))
	for i, v := range a {
		m.a64[i] = float64(v)
	}
	return m, nil
}

func (m *merge) jobs() []func() error {
	rowsPer := max(1, chunk/max(m.in, 1))
	var jobs []func() error
	for lo := 0; lo < m.rows; lo += rowsPer {
		hi := min(lo+rowsPer, m.rows)
		jobs = append(jobs, func() error { return m.run(lo, hi) })
	}
	return jobs
}

// run merges rows [lo, hi). Each delta element is the fp32 dot product
// Σ_k B[o,k]·A[k,i] accumulated in k order with one fused multiply-add per
// step (fp32 rounding after each), then scaled by s in fp32 and added to
// fp32(W) in fp32: the arithmetic of torch's fp32 merge, which this matches
// bit for bit on the golden fixtures. A bf16 or fp16 output rounds that sum once.
func (m *merge) run(lo, hi int) error {
	in, r := m.in, m.r
	acc := make([]float32, in)
	wrow := make([]float32, in)
	bk := make([]float64, r)
	for o := lo; o < hi; o++ {
		for k, v := range m.b[o*r : (o+1)*r] {
			bk[k] = float64(v)
		}
		loraAcc(acc, m.a64, bk, in)
		if m.out.DType == qwen35.BF16 && m.w.DType == safetensors.BF16 &&
			mergeRowBF16(m.out.BF16[o*in:(o+1)*in], m.w.Data[o*in*2:(o+1)*in*2], acc, m.s) {
			continue
		}
		size := m.w.DType.Size()
		row := safetensors.Tensor{Name: m.w.Name, File: m.w.File, DType: m.w.DType, Shape: []int{in},
			Data: m.w.Data[o*in*size : (o+1)*in*size]}
		if err := row.Float32Into(wrow); err != nil {
			return err
		}
		s := m.s
		if m.out.DType == qwen35.F32 {
			dst := m.out.F32[o*in : (o+1)*in]
			for i, a := range acc {
				dst[i] = wrow[i] + float32(a*s) // the conversion forbids fusing into an FMA
			}
		} else if m.out.DType == qwen35.F16 {
			dst := m.out.F16[o*in : (o+1)*in]
			for i, a := range acc {
				dst[i] = half.F16FromF32(wrow[i] + float32(a*s))
			}
		} else {
			dst := m.out.BF16[o*in : (o+1)*in]
			for i, a := range acc {
				dst[i] = half.BF16FromF32(wrow[i] + float32(a*s))
			}
		}
	}
	return nil
}
