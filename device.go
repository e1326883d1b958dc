package kev

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Device is where a predictor runs: CPU, CUDA, or "cuda:N" for the Nth GPU. A list runs one replica of the model
// per entry, each with its own model goroutine, batcher and prefix cache, and the predictor sends each request to
// the replica that will answer it soonest: "cuda:0,1" (or "cuda:0,cuda:1") is GPUs 0 and 1, "cuda:all" every GPU
// the driver sees, "cuda:0,0" two replicas on GPU 0. All entries name one backend. The CPU backend is always there;
// CUDA is there in programs that import github.com/kevgo/kev/tensor/cuda (blank import) built with -tags cuda.
type Device string

// The devices.
const (
	// CPU is the fp32 reference backend, on all cores (with BFloat16 its matrix products compute in bf16).
	CPU Device = "cpu"
	// CUDA is the first NVIDIA GPU, the same as "cuda:0".
	CUDA Device = "cuda"
)

// replica is one entry of a Device list: a backend and its device number.
type replica struct {
	name     string
	ordinal  int
	numbered bool // written with a number ("cuda:0"), or a backend of several devices
}

// String is the replica's device as Stats report it: "cpu", "cuda:0".
func (r replica) String() string {
	if !r.numbered {
		return r.name
	}
	return r.name + ":" + strconv.Itoa(r.ordinal)
}

// replicas returns the entries of d: one, or one per listed device ("all" asks the backend how many it has).
func (d Device) replicas() ([]replica, error) {
	bad := func(reason string) error { return &OptionError{Field: "Device", Value: string(d), Reason: reason} }
	var out []replica
	name := ""
	for i, item := range strings.Split(string(d), ",") {
		n, ord, hasOrd := strings.Cut(item, ":")
		if !hasOrd && i > 0 && item != "" && item[0] >= '0' && item[0] <= '9' {
			n, ord, hasOrd = name, item, true // "cuda:0,1": a bare number continues the backend before it
		}
		switch {
		case n == "":
			return nil, bad(`want a backend name, "cuda:N" with N a device number, "cuda:all", or a list of them ("cuda:0,1")`)
		case name != "" && n != name:
			return nil, bad("all replicas must run on one backend")
		}
		name = n
		if err := backendThere(d, n); err != nil {
			return nil, err
		}
		if !hasOrd {
			out = append(out, replica{name: n})
			continue
		}
		if ord == "all" {
			count, err := tensor.DeviceCount(n)
			if err != nil {
				return nil, bad(err.Error())
			}
			if count == 0 {
				return nil, bad("the " + n + " backend sees no device")
			}
			for k := range count {
				out = append(out, replica{name: n, ordinal: k, numbered: true})
			}
			continue
		}
		k, err := strconv.Atoi(ord)
		if err != nil || k < 0 || ord != strconv.Itoa(k) {
			return nil, bad(`want a backend name, "cuda:N" with N a device number, "cuda:all", or a list of them ("cuda:0,1")`)
		}
		out = append(out, replica{name: n, ordinal: k, numbered: true})
	}
	return out, nil
}

// backendThere checks that the program has the backend a Device names.
func backendThere(d Device, name string) error {
	if slices.Contains(tensor.Backends(), name) {
		return nil
	}
	reason := fmt.Sprintf("no such backend in this program (backends: %s)", strings.Join(tensor.Backends(), ", "))
	if name == string(CUDA) {
		reason += `; the CUDA backend needs a blank import of "github.com/kevgo/kev/tensor/cuda" and a build with -tags cuda`
	}
	return &OptionError{Field: "Device", Value: string(d), Reason: reason}
}

// openReplicas opens a backend instance per replica, closing those opened when one fails.
func openReplicas(d Device, rs []replica) ([]tensor.Backend, error) {
	var out []tensor.Backend
	for _, r := range rs {
		b, err := tensor.OpenDevice(r.name, r.ordinal)
		if err != nil {
			closeBackends(out)
			return nil, &OptionError{Field: "Device", Value: string(d), Reason: err.Error()}
		}
		out = append(out, b)
	}
	return out, nil
}

// closeBackends closes the backends that can be closed.
func closeBackends(bs []tensor.Backend) {
	for _, b := range bs {
		if c, ok := b.(io.Closer); ok {
			_ = c.Close() // best effort: the backend is given up
		}
	}
}

// DType is the type the model's parameters and activations are held in.
type DType string

// The parameter types. Load also reads "fp32", "bf16" and "fp16".
const (
	// Float32 is the reference type and the CPU's default; cpu device only (the cuda backend computes with bf16
	// weights and activations, and Load refuses Float32 there with an *OptionError rather than round it to bf16).
	Float32 DType = "float32"
	// BFloat16 is bf16 weights and bf16 products with fp32 accumulation, the GPU's default. On the GPU the
	// activations are bf16 too; on the CPU they stay fp32 and each matrix product rounds its input to bf16 (to
	// nearest even) and sums the bf16 products in fp32 (AMX or AVX512_BF16 where the processor has them), every other
	// operation in fp32.
	BFloat16 DType = "bfloat16"
	// Float16 is IEEE fp16 weights (Kev's KEV_DTYPE=float16), computed in fp32; CPU only.
	Float16 DType = "float16"
	// FP8 is FP8 E4M3 matrix products (Kev's KEV_DTYPE=fp8): the weight of every matrix product of the decoder
	// layers (attention q/k/v/o, Gated DeltaNet in/out projections, MLP gate/up/down) quantized once when it is
	// loaded, from its fp32 values with the LoRA merged in fp32, with one scale per output channel; activations
	// quantized per token by each product; each product summed over all of K in the tensor cores' fp32 accumulators
	// (KEV_CUDA_FP8_PROMOTE=1 adds every 128 codes' sums to a separate fp32 total); everything else (embedding,
	// norms, conv weights, the pointer head, the activations between products) as BFloat16 holds it. Nothing
	// quantized is written to disk. It needs
	// the cuda device on an NVIDIA GPU of compute capability 9.0 (Hopper: the FP8 kernels are built for sm_90a);
	// Load refuses it with an *OptionError on other GPUs (8.9 included, for now) and on the cpu device. A product
	// weight whose shape the FP8 kernels do not take (rows not a multiple of 8, columns not of 16) stays bf16, and
	// Load logs it. Check its accuracy on your own data against bfloat16 (kev eval -compare bfloat16).
	FP8 DType = "fp8"
)

// parseDType maps Options.DType to the weights' type and its canonical name; the default depends on the device.
func parseDType(s DType, backend string) (qwen35.DType, DType, error) {
	if s == "" {
		if backend == string(CPU) {
			s = Float32
		} else {
			s = BFloat16
		}
	}
	switch strings.ToLower(string(s)) {
	case "fp32", "float32":
		if backend == string(CUDA) {
			return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: "fp32 compute is supported on the cpu device only; " +
				"the cuda backend computes with bf16 weights and activations (use bfloat16, or the cpu device for fp32 references)"}
		}
		return qwen35.F32, Float32, nil
	case "bf16", "bfloat16":
		return qwen35.BF16, BFloat16, nil
	case "fp16", "float16", "half":
		if backend != string(CPU) {
			return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: "fp16 compute is supported on the cpu device only; the " +
				backend + " backend computes with bf16 weights (use bfloat16)"}
		}
		return qwen35.F16, Float16, nil
	case "fp8", "float8", "e4m3", "float8_e4m3", "float8_e4m3fn":
		if backend == string(CPU) {
			return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: "fp8 needs an NVIDIA GPU of compute capability 9.0 " +
				"(Hopper) and the cuda device; the cpu device computes in float32, bfloat16 or float16"}
		}
		// bf16 weights but for the product weights, kept fp32 (the LoRA merged in fp32) for the backend to quantize
		// once (checkpoint.Options.ProductsF32, layers.Options.FP8)
		return qwen35.BF16, FP8, nil
	}
	return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: `want "float32", "bfloat16", "float16" or "fp8" ("fp32", "bf16", "fp16")`}
}

// checkFP8 checks that every replica's backend computes with FP8 weights (tensor.CheckFP8: the GPU's compute
// capability), and names the first replica that does not in an *OptionError.
func checkFP8(s DType, backends []tensor.Backend) error {
	for i, b := range backends {
		if err := tensor.CheckFP8(b); err != nil {
			return &OptionError{Field: "DType", Value: string(s), Reason: fmt.Sprintf("replica %d: %v", i, err)}
		}
	}
	return nil
}

// fp8WeightBytes is what one replica holds of the weights of an FP8 load of a model with config c, host the bytes of
// its tensors as the checkpoint builds them (product weights fp32, four bytes an element): each product weight one
// byte an element and four a row (its scale), or two bytes an element for those kept in bf16 (kept, as
// layers.Model.KeptBF16 names them: stacked weights' names joined with "+").
func fp8WeightBytes(c *qwen35.Config, host int64, kept []string) int64 {
	bf16 := map[string]bool{}
	for _, k := range kept {
		for _, n := range strings.Split(k, "+") {
			bf16[n] = true
		}
	}
	for name, shape := range checkpoint.ExpectedShapes(c) {
		if !checkpoint.ProductWeight(name) || len(shape) != 2 {
			continue
		}
		n := int64(shape[0]) * int64(shape[1])
		if bf16[name] {
			host -= 2 * n
		} else {
			host -= 3*n - 4*int64(shape[0])
		}
	}
	return host
}
