package cuda

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestPTXFresh checks that every kernels/*.ptx was generated from the current source with the flags it names
// (the hash on its first line, see kernels/build.sh), and that every .cu has its PTX.
func TestPTXFresh(t *testing.T) {
	srcs, _ := filepath.Glob("kernels/*.cu")
	ptxs, _ := filepath.Glob("kernels/*.ptx")
	headers, _ := filepath.Glob("kernels/*.cuh")
	sort.Strings(headers)
	if len(srcs) == 0 {
		t.Fatal("no kernels/*.cu")
	}
	var hdr []byte
	for _, h := range headers {
		b, err := os.ReadFile(h)
		if err != nil {
			t.Fatal(err)
		}
		hdr = append(hdr, b...)
	}
	have := map[string]bool{}
	for _, p := range ptxs {
		name := filepath.Base(p)
		dot := strings.IndexByte(name, '.')
		src := filepath.Join("kernels", name[:dot]+".cu")
		have[src] = true
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if err != nil {
			t.Fatalf("%s: reading first line: %v", p, err)
		}
		const pre = "// kev-ptx source-sha256="
		line = strings.TrimSuffix(line, "\n")
		if !strings.HasPrefix(line, pre) {
			t.Errorf("%s: first line %q lacks %q; regenerate with go generate ./tensor/cuda/", p, line, pre)
			continue
		}
		want, flags, ok := strings.Cut(strings.TrimPrefix(line, pre), " flags=")
		if !ok {
			t.Errorf("%s: first line %q has no flags=", p, line)
			continue
		}
		code, err := os.ReadFile(src)
		if err != nil {
			t.Errorf("%s: its source %s: %v", p, src, err)
			continue
		}
		h := sha256.New()
		h.Write(code)
		h.Write(hdr)
		h.Write([]byte(flags))
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%s is stale: %s (+ headers, flags %q) hashes to %s, PTX records %s; run go generate ./tensor/cuda/",
				p, src, flags, got, want)
		}
		if !bytes.Contains([]byte(flags), []byte("-ptx")) {
			t.Errorf("%s: flags %q do not produce PTX", p, flags)
		}
	}
	for _, s := range srcs {
		if !have[s] {
			t.Errorf("%s has no PTX; run go generate ./tensor/cuda/", s)
		}
	}
}

// TestCubinFresh checks that every PTX has its machine code for the architectures kernels/build.sh assembles
// (sm_80 and sm_90 for the portable modules, sm_90a for the Hopper-only ones), that each cubin's .sum line names
// the current PTX's sha256, and that the cubin is the one the line describes. No GPU needed.
func TestCubinFresh(t *testing.T) {
	ptxs, _ := filepath.Glob("kernels/*.ptx")
	if len(ptxs) == 0 {
		t.Fatal("no kernels/*.ptx")
	}
	want := map[string]bool{}
	for _, p := range ptxs {
		archs := []string{"sm_80"}
		switch {
		case strings.HasSuffix(p, ".sm90a.ptx"):
			archs = []string{"sm_90a"}
		case strings.HasSuffix(p, ".sm90.ptx"):
			archs = []string{"sm_90"}
		}
		ptx, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ptxHash := sha256.Sum256(ptx)
		for _, arch := range archs {
			cubin := strings.TrimSuffix(p, ".ptx") + "." + arch + ".cubin"
			want[cubin] = true
			code, err := os.ReadFile(cubin)
			if err != nil {
				t.Errorf("%s: no machine code for %s (%v); run go generate ./tensor/cuda/", p, arch, err)
				continue
			}
			sum, err := os.ReadFile(cubin + ".sum")
			if err != nil {
				t.Errorf("%s: %v", cubin, err)
				continue
			}
			line := strings.TrimSuffix(string(sum), "\n")
			const pre = "kev-cubin ptx-sha256="
			rest, ok := strings.CutPrefix(line, pre)
			if !ok {
				t.Errorf("%s.sum: %q lacks %q", cubin, line, pre)
				continue
			}
			fields := strings.Fields(rest)
			if len(fields) < 3 || !strings.HasPrefix(fields[len(fields)-1], "cubin-sha256=") {
				t.Errorf("%s.sum: %q is not ptx-sha256=… flags=… cubin-sha256=…", cubin, line)
				continue
			}
			if fields[0] != hex.EncodeToString(ptxHash[:]) {
				t.Errorf("%s is stale: made from a PTX hashing to %s, %s now hashes to %x; run go generate ./tensor/cuda/",
					cubin, fields[0], p, ptxHash)
			}
			if !strings.Contains(rest, "-arch="+arch) {
				t.Errorf("%s.sum: flags in %q are not for %s", cubin, line, arch)
			}
			codeHash := sha256.Sum256(code)
			if got := strings.TrimPrefix(fields[len(fields)-1], "cubin-sha256="); got != hex.EncodeToString(codeHash[:]) {
				t.Errorf("%s hashes to %x, its .sum says %s", cubin, codeHash, got)
			}
			if !bytes.HasPrefix(code, []byte("\x7fELF")) {
				t.Errorf("%s is not an ELF cubin", cubin)
			}
		}
	}
	cubins, _ := filepath.Glob("kernels/*.cubin")
	for _, c := range cubins {
		if !want[c] {
			t.Errorf("%s belongs to no PTX; remove it", c)
		}
	}
}

// TestKernelsWaitForGrid checks that every kernel begins with KEV_GRID_DEP() (kernels/pdl.cuh): on compute
// capability 9.0 kernels are launched as programmatic dependents of the kernel before them, so one that touched
// memory before waiting could read its inputs before they are written. The GEMM kernels that load their first W
// tiles (weights, which no kernel writes) before they wait begin with KEV_GRID_DEP_DEFERRED() instead, and their
// threads call kev_grid_wait() themselves.
func TestKernelsWaitForGrid(t *testing.T) {
	srcs, _ := filepath.Glob("kernels/*.cu")
	kernels := 0
	for _, p := range srcs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for at := 0; ; {
			i := strings.Index(s[at:], `extern "C" __global__`)
			if i < 0 {
				break
			}
			i += at
			open := strings.IndexByte(s[i:], '{')
			if open < 0 {
				t.Fatalf("%s: kernel at byte %d has no body", p, i)
			}
			body := strings.TrimLeft(s[i+open+1:], " \t\r\n\\")
			deferred := strings.HasPrefix(body, "KEV_GRID_DEP_DEFERRED();") && strings.Contains(s, "kev_grid_wait();")
			if !strings.HasPrefix(body, "KEV_GRID_DEP();") && !deferred {
				line := 1 + strings.Count(s[:i], "\n")
				t.Errorf("%s:%d: the kernel does not begin with KEV_GRID_DEP() (or KEV_GRID_DEP_DEFERRED() in a source whose threads call kev_grid_wait())", p, line)
			}
			kernels++
			at = i + open
		}
	}
	if kernels < 50 {
		t.Errorf("found %d kernels, expected more: has the declaration style changed?", kernels)
	}
}
