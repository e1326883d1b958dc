//go:build cuda

package cuda

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestKernelLaunchConstants checks the host's launch constants against the #defines of the kernels they describe:
// a grid sized for another block shape or row count would leave rows uncomputed or compute them twice.
func TestKernelLaunchConstants(t *testing.T) {
	for _, c := range []struct {
		file, name string
		want       int
	}{
		{"segs.cu", "CONV_VX", convVecs},
		{"segs.cu", "CONV_WY", convRowThreads},
		{"segs.cu", "CONV_RB", convRows},
		{"nn.cu", "QK_BLOCKS_SM", qkRopeA1BlocksSM},
	} {
		src, err := os.ReadFile("kernels/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^#define ` + c.name + `\s+(\d+)`).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s: no #define %s", c.file, c.name)
			continue
		}
		if v, _ := strconv.Atoi(string(m[1])); v != c.want {
			t.Errorf("%s: #define %s %d, the host launches for %d", c.file, c.name, v, c.want)
		}
	}
}
