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
