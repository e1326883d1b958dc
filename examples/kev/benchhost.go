package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/cpu"

	kevcpu "github.com/kevgo/kev/tensor/cpu"
)

// hostCPU is where kev bench ran and how: the report's "host_cpu" object.
type hostCPU struct {
	Model       string   `json:"model"`        // /proc/cpuinfo's "model name"; "" where there is none
	LogicalCPUs int      `json:"logical_cpus"` // runtime.NumCPU: the CPUs the process may run on (taskset narrows it)
	GOMAXPROCS  int      `json:"gomaxprocs"`
	Features    []string `json:"features"` // the vector extensions of the processor that CPU kernels may use
	Kernel      *string  `json:"kernel"`   // the CPU backend's matrix kernels (cpu.Kernels): "fp32 avx512, bf16 amx"
}

// cpuKernel names the CPU backend's matrix kernels, "" when they are not known.
var cpuKernel = kevcpu.Kernels

// readHostCPU describes the host processor.
func readHostCPU() hostCPU {
	h := hostCPU{Model: cpuModel("/proc/cpuinfo"), LogicalCPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Features: cpuFeatures()}
	if k := cpuKernel(); k != "" {
		h.Kernel = &k
	}
	return h
}

// cpuModel returns the first "model name" of a /proc/cpuinfo file, or "" when it has none or cannot be read.
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// cpuFeatures lists the x86 extensions the CPU kernels may use that the processor has (none elsewhere).
func cpuFeatures() []string {
	x := cpu.X86
	out := []string{}
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"avx2", x.HasAVX2}, {"fma", x.HasFMA}, {"avx512f", x.HasAVX512F}, {"avx512bw", x.HasAVX512BW},
		{"avx512vl", x.HasAVX512VL}, {"avx512bf16", x.HasAVX512BF16}, {"amx_tile", x.HasAMXTile},
		{"amx_bf16", x.HasAMXBF16},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	return out
}

// caseSelection is kev bench's -case flag: case names or 1-based indices into the cases file, repeatable.
type caseSelection []string

// String returns the selection as given.
func (s *caseSelection) String() string { return strings.Join(*s, "; ") }

// Set adds one case.
func (s *caseSelection) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("empty case name")
	}
	*s = append(*s, v)
	return nil
}

// pick returns the selected cases in the file's order (all of them for an empty selection); a name or index that
// is not in the file is a CasesError.
func (s caseSelection) pick(file string, cases []benchCase) ([]benchCase, error) {
	if len(s) == 0 {
		return cases, nil
	}
	keep := make([]bool, len(cases))
	for _, v := range s {
		i := caseIndex(cases, v)
		if i < 0 {
			names := make([]string, len(cases))
			for j, c := range cases {
				names[j] = strconv.Quote(c.name)
			}
			return nil, &CasesError{File: file, Case: v, Err: fmt.Errorf("no such case: want a name or an index 1..%d of %s",
				len(cases), strings.Join(names, ", "))}
		}
		keep[i] = true
	}
	var out []benchCase
	for i, c := range cases {
		if keep[i] {
			out = append(out, c)
		}
	}
	return out, nil
}

// caseIndex finds v among the cases, by exact name first, then as a 1-based index; -1 when it is neither.
func caseIndex(cases []benchCase, v string) int {
	for i, c := range cases {
		if c.name == v {
			return i
		}
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= len(cases) {
		return n - 1
	}
	return -1
}
