package kev

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Device is where a predictor runs: CPU, CUDA, or "cuda:N" for the Nth GPU. The CPU backend is always there; CUDA
// is there in programs that import github.com/kevgo/kev/tensor/cuda (blank import) built with -tags cuda.
type Device string

// The devices.
const (
	CPU  Device = "cpu"  // the fp32 reference backend, on all cores
	CUDA Device = "cuda" // the first NVIDIA GPU, the same as "cuda:0"
)

// DType is the type the model's parameters and activations are held in.
type DType string

// The parameter types. Load also reads "fp32", "bf16" and "fp16".
const (
	Float32  DType = "float32"  // the reference; the CPU's default
	BFloat16 DType = "bfloat16" // bf16 weights and activations with fp32 accumulation; the GPU's default
	Float16  DType = "float16"  // IEEE fp16 weights (Kev's KEV_DTYPE=float16), computed in fp32; CPU only
)

// backend returns the tensor backend name and device ordinal of d.
func (d Device) backend() (string, int, error) {
	name, ord, hasOrd := strings.Cut(string(d), ":")
	if !hasOrd {
		return name, 0, nil
	}
	n, err := strconv.Atoi(ord)
	if err != nil || n < 0 || ord != strconv.Itoa(n) {
		return "", 0, &OptionError{Field: "Device", Value: string(d), Reason: `want a backend name, or "cuda:N" with N a device number`}
	}
	return name, n, nil
}

// openDevice opens the backend of d. Only device 0 of a backend can be opened yet.
func openDevice(d Device) (tensor.Backend, error) {
	name, ord, err := d.backend()
	if err != nil {
		return nil, err
	}
	if ord != 0 {
		return nil, &OptionError{Field: "Device", Value: string(d), Reason: "only device 0 is supported"}
	}
	if !slices.Contains(tensor.Backends(), name) {
		reason := fmt.Sprintf("no such backend in this program (backends: %s)", strings.Join(tensor.Backends(), ", "))
		if name == string(CUDA) {
			reason += `; the CUDA backend needs a blank import of "github.com/kevgo/kev/tensor/cuda" and a build with -tags cuda`
		}
		return nil, &OptionError{Field: "Device", Value: string(d), Reason: reason}
	}
	b, err := tensor.Open(name)
	if err != nil {
		return nil, &OptionError{Field: "Device", Value: string(d), Reason: err.Error()}
	}
	return b, nil
}

// parseDType maps Options.DType to the weights' type and its canonical name; the default depends on the device.
func parseDType(s DType, device Device) (qwen35.DType, DType, error) {
	if s == "" {
		if device == CPU {
			s = Float32
		} else {
			s = BFloat16
		}
	}
	switch strings.ToLower(string(s)) {
	case "fp32", "float32":
		return qwen35.F32, Float32, nil
	case "bf16", "bfloat16":
		return qwen35.BF16, BFloat16, nil
	case "fp16", "float16", "half":
		if name, _, _ := device.backend(); name != string(CPU) {
			return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: "fp16 compute is supported on the cpu device only; the " +
				string(device) + " backend computes with bf16 weights (use bfloat16)"}
		}
		return qwen35.F16, Float16, nil
	}
	return 0, "", &OptionError{Field: "DType", Value: string(s), Reason: `want "float32", "bfloat16" or "float16" ("fp32", "bf16", "fp16")`}
}
