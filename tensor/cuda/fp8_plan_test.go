package cuda

import (
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFP8WidthsMatchKernels checks fp8Widths and fp8GatedWidths against the FP8_TILE and FP8_GATED lines of
// kernels/fp8_sm90a.cu: a width the plan picks without its kernel would fail at launch, and a ring depth other than
// the kernel's would give it the wrong shared memory. Every kernel must also fit a block's 227 KiB.
func TestFP8WidthsMatchKernels(t *testing.T) {
	src, err := os.ReadFile("kernels/fp8_sm90a.cu")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^FP8_TILE\(gemm_fp8_wgmma_128x(\d+), (\d+), (\d+)\)`)
	var got []fp8Width
	for _, m := range re.FindAllSubmatch(src, -1) {
		name, _ := strconv.Atoi(string(m[1]))
		bn, _ := strconv.Atoi(string(m[2]))
		stages, _ := strconv.Atoi(string(m[3]))
		if name != bn {
			t.Errorf("kernel gemm_fp8_wgmma_128x%d is %d columns wide", name, bn)
		}
		got = append(got, fp8Width{bn, stages})
	}
	if !slices.Equal(got, fp8Widths) {
		t.Errorf("kernels %v, fp8Widths %v", got, fp8Widths)
	}
	var gated []int
	reG := regexp.MustCompile(`(?m)^FP8_GATED\(gemm_fp8_wgmma_g128x(\d+), (\d+), (\d+)\)`)
	for _, m := range reG.FindAllSubmatch(src, -1) {
		name, _ := strconv.Atoi(string(m[1]))
		bn, _ := strconv.Atoi(string(m[2]))
		stages, _ := strconv.Atoi(string(m[3]))
		if name != bn || bn%16 != 0 || stages != fp8Stages(bn) {
			t.Errorf("gated kernel g128x%d: %d wide, %d stages (want a multiple of 16 and %d stages)", name, bn, stages, fp8Stages(bn))
		}
		gated = append(gated, bn)
	}
	if !slices.Equal(gated, fp8GatedWidths) {
		t.Errorf("gated kernels %v, fp8GatedWidths %v", gated, fp8GatedWidths)
	}
	// the persistent, the cluster, the persistent cluster, the half-column and the X-sharing cluster kernels: plain
	// and gated, one of each for every width of their list, with the ring depth of the plain kernel of that width
	var clustered, plain []int
	for _, w := range fp8Widths {
		if fp8Cluster(256, w.bn) {
			clustered = append(clustered, w.bn)
		}
		plain = append(plain, w.bn)
	}
	for _, f := range []struct {
		kind   string
		widths []int
	}{
		{"FP8_XC(gemm_fp8_wgmma_x128x", plain},
		{"FP8_XC_GATED(gemm_fp8_wgmma_xg128x", fp8GatedWidths},
		{"FP8_PERSIST(gemm_fp8_wgmma_p128x", fp8PersistWidths},
		{"FP8_PERSIST_GATED(gemm_fp8_wgmma_pg128x", fp8PersistWidths},
		{"FP8_MC(gemm_fp8_wgmma_m128x", clustered},
		{"FP8_MC_GATED(gemm_fp8_wgmma_mg128x", clustered},
		{"FP8_PERSIST_MC(gemm_fp8_wgmma_pm128x", fp8PersistWidths},
		{"FP8_PERSIST_MC_GATED(gemm_fp8_wgmma_pmg128x", fp8PersistWidths},
		{"FP8_HALF(gemm_fp8_wgmma_h128x", fp8HalfWidths},
		{"FP8_HALF_GATED(gemm_fp8_wgmma_hg128x", fp8HalfGatedWidths},
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f.kind) + `(\d+), (\d+), (\d+)\)`)
		var got []int
		for _, m := range re.FindAllSubmatch(src, -1) {
			name, _ := strconv.Atoi(string(m[1]))
			bn, _ := strconv.Atoi(string(m[2]))
			stages, _ := strconv.Atoi(string(m[3]))
			if name != bn || stages != fp8Stages(bn) || bn%16 != 0 && f.kind != "FP8_XC(gemm_fp8_wgmma_x128x" {
				t.Errorf("%s%d: %d wide, %d stages (want %d stages and a multiple of 16)", f.kind, name, bn, stages, fp8Stages(bn))
			}
			got = append(got, bn)
		}
		if !slices.Equal(got, f.widths) {
			t.Errorf("%s… kernels %v, want %v", f.kind, got, f.widths)
		}
	}
	for _, w := range fp8Widths {
		if w.bn%8 != 0 || w.bn < 8 || w.bn > 256 {
			t.Errorf("width %d: wgmma and the copy engine need a multiple of 8 up to 256", w.bn)
		}
		if shared := w.stages*(128+w.bn)*128 + 1024 + 16*w.stages; shared > 227<<10 {
			t.Errorf("width %d: %d stages need %d bytes of shared memory", w.bn, w.stages, shared)
		}
	}
}

// TestFP8FastWidthsMatchKernels checks fp8FastWidths against the FAST kernels of kernels/fp8_sm90a.cu: plain,
// gated, one tile a block and persistent, one of each for every width, with its ring depth, within a block's 227
// KiB and the copy engine's 256 rows; and that no FAST width is also a width of the promoted kernels (the host tells
// them apart by width).
func TestFP8FastWidthsMatchKernels(t *testing.T) {
	src, err := os.ReadFile("kernels/fp8_sm90a.cu")
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, w := range fp8FastWidths {
		want = append(want, w.bn)
		if fp8Stages(w.bn) != 0 {
			t.Errorf("width %d is both a FAST and a promoted kernel's", w.bn)
		}
		if shared := w.stages*(128+w.bn)*128 + 1024 + 16*w.stages; shared > 227<<10 || w.bn%16 != 0 || w.bn > 256 {
			t.Errorf("FAST width %d, %d stages: %d bytes of shared memory (want a multiple of 16 up to 256 within 227 KiB)", w.bn, w.stages, shared)
		}
	}
	for _, kind := range []string{"FP8_FAST(gemm_fp8_wgmma_f128x", "FP8_FAST_GATED(gemm_fp8_wgmma_fg128x",
		"FP8_FAST_PERSIST(gemm_fp8_wgmma_pf128x", "FP8_FAST_PERSIST_GATED(gemm_fp8_wgmma_pfg128x"} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(kind) + `(\d+), (\d+), (\d+)\)`)
		var got []int
		for _, m := range re.FindAllSubmatch(src, -1) {
			name, _ := strconv.Atoi(string(m[1]))
			bn, _ := strconv.Atoi(string(m[2]))
			stages, _ := strconv.Atoi(string(m[3]))
			if name != bn || stages != fp8FastStages(bn) {
				t.Errorf("%s%d: %d wide, %d stages (want %d)", kind, name, bn, stages, fp8FastStages(bn))
			}
			got = append(got, bn)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s… kernels %v, want %v", kind, got, want)
		}
	}
}

// TestParseFP8Wide checks KEV_CUDA_FP8_WIDE's values: empty is fp8WideDefault, "off" 0, a FAST width itself,
// anything else an error naming the variable.
func TestParseFP8Wide(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{"", fp8WideDefault}, {"off", 0}, {"OFF", 0}, {"192", 192}, {" 256", 256}} {
		if got, err := parseFP8Wide(c.in); err != nil || got != c.want {
			t.Errorf("parseFP8Wide(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"144", "0", "wide", "512"} {
		if _, err := parseFP8Wide(in); err == nil || !strings.Contains(err.Error(), "KEV_CUDA_FP8_WIDE") {
			t.Errorf("parseFP8Wide(%q): error %v, want one naming KEV_CUDA_FP8_WIDE", in, err)
		}
	}
}

// TestFP8Plan checks the plan on the Kev-4B shapes: the wide products fill the multiprocessors in one round at a
// question pass's rows, the 2,560-column products run narrow tiles until the rows fill the multiprocessors, the
// plan never costs more than the 128-column tile it replaced, and the SwiGLU-fused kernels keep their widths.
func TestFP8Plan(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		M, N, K int
		want    func(bn int) bool
		what    string
	}{
		{40, 18432, 2560, func(bn int) bool { return bn == 144 }, "144 (128 tiles on 132 multiprocessors)"},
		{240, 18432, 2560, func(bn int) bool { return bn == 144 }, "144 (two rounds, not three)"},
		{40, 2560, 9216, func(bn int) bool { return bn <= 48 }, "≤ 48"},
		{240, 2560, 4096, func(bn int) bool { return 2*((2560+bn-1)/bn) <= sms }, "one round"},
		{16384, 2560, 9216, func(bn int) bool { return bn >= 128 }, "≥ 128 at 16,384 rows"},
	} {
		if bn := fp8Plan(c.M, c.N, c.K, sms, false); !c.want(bn) {
			t.Errorf("M=%d N=%d K=%d: bn %d, want %s", c.M, c.N, c.K, bn, c.what)
		}
	}
	for _, s := range gemmShapesFP8 {
		for _, M := range []int{1, 40, 89, 128, 240, 257, 567, 2392, 16384} {
			bn := fp8Plan(M, s[0], s[1], sms, false)
			if fp8Stages(bn) == 0 {
				t.Fatalf("M=%d N=%d: bn %d has no kernel", M, s[0], bn)
			}
			if c, c128 := fp8Cost(M, s[0], s[1], sms, bn), fp8Cost(M, s[0], s[1], sms, 128); c > c128 {
				t.Errorf("M=%d N=%d K=%d: bn %d costs %.1f µs, more than 128's %.1f", M, s[0], s[1], bn, c, c128)
			}
			if bng := fp8Plan(M, s[0], s[1], sms, true); !slices.Contains(fp8GatedWidths, bng) {
				t.Errorf("M=%d N=%d gated: bn %d has no kernel", M, s[0], bng)
			}
		}
	}
}

// gemmShapesFP8 are the Kev-4B products (N, K): gate and up, the mixers' input projections (delta-rule layers and
// attention layers), the MLP's down projection, the mixers' output projections.
var gemmShapesFP8 = [][2]int{{18432, 2560}, {12352, 2560}, {10240, 2560}, {2560, 9216}, {2560, 4096}}

// TestFP8PlanMeasured checks fp8Plan against the every-width sweep measured on the H100
// (testdata/fp8_widths_h100.txt): at every measured shape the planned width's time is within 5 % of the fastest
// width's.
func TestFP8PlanMeasured(t *testing.T) {
	src, err := os.ReadFile("testdata/fp8_widths_h100.txt")
	if err != nil {
		t.Fatal(err)
	}
	type shape struct{ M, N, K int }
	us := map[shape]map[int]float64{}
	for i, line := range strings.Split(string(src), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("line %d: field %q is not key=value", i+1, f)
			}
			kv[k] = v
		}
		num := func(k string) float64 {
			v, err := strconv.ParseFloat(kv[k], 64)
			if err != nil {
				t.Fatalf("line %d: %s: %v", i+1, k, err)
			}
			return v
		}
		s := shape{int(num("M")), int(num("N")), int(num("K"))}
		if us[s] == nil {
			us[s] = map[int]float64{}
		}
		us[s][int(num("bn"))] = num("us") // the sweep's 128 comes after the forced row: the later one counts
	}
	if len(us) < 20 {
		t.Fatalf("%d shapes in the sweep, want 20", len(us))
	}
	for s, m := range us {
		if len(m) != len(fp8Widths) {
			t.Errorf("%+v: %d widths measured, want %d", s, len(m), len(fp8Widths))
			continue
		}
		best, fastest := math.Inf(1), 0
		for bn, v := range m {
			if v < best {
				best, fastest = v, bn
			}
		}
		bn := fp8Plan(s.M, s.N, s.K, 132, false)
		if m[bn] > 1.05*best {
			t.Errorf("%+v: planned width %d took %.1f µs, width %d %.1f", s, bn, m[bn], fastest, best)
		}
	}
}

// TestFP8Cluster checks which products run on the cluster kernels: more than one row tile, and a width with a
// cluster kernel (a multiple of 16: every gated width, none of 24 and 40).
func TestFP8Cluster(t *testing.T) {
	for _, c := range []struct {
		m, bn int
		want  bool
	}{
		{1, 64, false}, {128, 144, false}, {129, 144, true}, {240, 96, true}, {16384, 128, true},
		{240, 24, false}, {240, 40, false}, {2392, 48, true},
	} {
		if got := fp8Cluster(c.m, c.bn); got != c.want {
			t.Errorf("fp8Cluster(%d, %d) = %v, want %v", c.m, c.bn, got, c.want)
		}
	}
	for _, bn := range fp8GatedWidths {
		if !fp8Cluster(256, bn) {
			t.Errorf("gated width %d has no cluster kernel", bn)
		}
	}
}

// TestFP8Persistent checks which products run on the persistent kernels: more tiles than multiprocessors, at a width
// that has one.
func TestFP8Persistent(t *testing.T) {
	for _, c := range []struct {
		tiles, bn int
		want      bool
	}{
		{132, 144, false}, {133, 144, true}, {2432, 128, true}, {2432, 96, true}, {2432, 80, false}, {16, 144, false},
	} {
		if got := fp8Persistent(c.tiles, 132, c.bn); got != c.want {
			t.Errorf("fp8Persistent(%d, 132, %d) = %v, want %v", c.tiles, c.bn, got, c.want)
		}
	}
}

// TestFP8FlagsMatchSource checks that the host's flag values are the kernel source's (fp8Flags builds the kernels'
// flags parameter from them).
func TestFP8FlagsMatchSource(t *testing.T) {
	src, err := os.ReadFile("kernels/fp8_sm90a.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		val  int
	}{{"FP8_PIPE", fp8FlagPipe}, {"FP8_PROMO_SHIFT", fp8PromoShift}} {
		m := regexp.MustCompile(`(?m)^#define ` + c.name + ` (\d+)$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("kernels/fp8_sm90a.cu defines no %s", c.name)
			continue
		}
		if v, _ := strconv.Atoi(string(m[1])); v != c.val {
			t.Errorf("%s = %d in the kernel source, %d on the host", c.name, v, c.val)
		}
	}
}

// TestFP8HalfWidths checks that a half-column kernel's halves (gated: quarters) are whole 8-column products and
// 8-row swizzle atoms, as kernels/fp8_sm90a.cu's static_assert wants, and that every such plain and gated width of
// the tile kernels has one.
func TestFP8HalfWidths(t *testing.T) {
	for _, w := range fp8Widths {
		if want := w.bn%16 == 0; fp8Half(64, w.bn, false) != want {
			t.Errorf("width %d: half kernel %v, want %v", w.bn, !want, want)
		}
	}
	for _, bn := range fp8GatedWidths {
		if want := bn%32 == 0; fp8Half(64, bn, true) != want {
			t.Errorf("gated width %d: half kernel %v, want %v", bn, !want, want)
		}
	}
	if fp8Half(65, 64, false) || fp8Half(65, 64, true) {
		t.Error("a half-column kernel for 65 rows: its tiles' rows would not all be computed")
	}
}

// TestParseFP8Promote checks KEV_CUDA_FP8_PROMOTE's values: empty and "all" are the longest interval, a
// number of k tiles within 1 … fp8PromoMax itself, anything else an error that names the variable; and that the
// longest interval fits the flags' eight bits above fp8PromoShift.
func TestParseFP8Promote(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{"", fp8PromoMax}, {" 4 ", 4}, {"1", 1}, {"ALL", fp8PromoMax}, {"all", fp8PromoMax}, {"256", 256}} {
		got, err := parseFP8Promote(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseFP8Promote(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"0", "-1", "257", "four", "2.5"} {
		if _, err := parseFP8Promote(in); err == nil || !strings.Contains(err.Error(), "KEV_CUDA_FP8_PROMOTE") {
			t.Errorf("parseFP8Promote(%q): error %v, want one naming KEV_CUDA_FP8_PROMOTE", in, err)
		}
	}
	if (fp8PromoMax-1)>>8 != 0 {
		t.Errorf("fp8PromoMax %d does not fit the flags' eight bits", fp8PromoMax)
	}
}

// TestFP8Wide checks where the wide FAST tiles replace the planned width on the Kev-4B shapes (132 multiprocessors):
// the products with four rounds of wide tiles or more at 2,392 and 16,384 rows, none at 240 or 257 rows (one round
// would leave multiprocessors idle), not the 2,560-column products at 2,392 rows (190 tiles), never a planned width
// under 128, and nothing with the wide tiles off.
func TestFP8Wide(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		M, N, bn, wide int
		gated          bool
		want           int
	}{
		{2392, 18432, 144, 256, true, 256},  // gate/up: 19 × 72 tiles
		{2392, 12352, 144, 256, false, 256}, // DeltaNet input: 19 × 49
		{2392, 10240, 144, 256, false, 256}, // attention input: 19 × 40
		{2392, 2560, 128, 256, false, 128},  // down, output: 19 × 10 = 190 tiles
		{16384, 2560, 144, 256, false, 256}, // 128 × 10
		{16384, 18432, 144, 192, true, 192},
		{240, 18432, 144, 256, true, 144}, // 2 × 72: one round
		{257, 18432, 144, 256, true, 144},
		{240, 2560, 40, 256, false, 40},
		{16384, 2560, 96, 256, false, 96}, // planned under 128
		{16384, 18432, 144, 0, true, 144}, // off
	} {
		if got := fp8Wide(c.M, c.N, sms, c.bn, c.wide, c.gated); got != c.want {
			t.Errorf("fp8Wide(M=%d, N=%d, bn=%d, wide=%d, gated %v) = %d, want %d", c.M, c.N, c.bn, c.wide, c.gated, got, c.want)
		}
	}
}

// TestFP8XCluster checks which products the X-sharing cluster kernels take: two column tiles or more, and tiles
// (column tiles rounded up to whole pairs) within one round of the multiprocessors.
func TestFP8XCluster(t *testing.T) {
	for _, c := range []struct {
		mT, nT, sms int
		want        bool
	}{
		{2, 64, 132, true},   // 2,560 columns 40 wide at 222 rows
		{3, 40, 132, true},   // 64 wide at 257 rows
		{3, 43, 132, true},   // 43 column tiles run as 44
		{3, 44, 132, true},   // exactly one round
		{3, 45, 132, false},  // 46 × 3 > 132
		{1, 1, 132, false},   // one column tile: nothing to share
		{1, 2, 132, true},    // one pair
		{2, 128, 132, false}, // the gate/up product at 222 rows: more than a round
		{2, 64, 114, false},  // a GPU of 114 multiprocessors
	} {
		if got := fp8XCluster(c.mT, c.nT, c.sms); got != c.want {
			t.Errorf("fp8XCluster(%d, %d, %d) = %v, want %v", c.mT, c.nT, c.sms, got, c.want)
		}
	}
}

// TestPlanFP8 checks the kernel GEMMFP8 launches for the Kev-4B shape's products on 132 multiprocessors with the
// device's defaults (all of K in the tensor cores, 256-column FAST tiles, persistent blocks) and with each kernel
// form switched on or forced, and the forms it refuses, naming the field.
func TestPlanFP8(t *testing.T) {
	def := fp8Knobs{sms: 132, promo: fp8PromoMax, wide: 256, persist: true}
	with := func(f func(*fp8Knobs)) fp8Knobs { k := def; f(&k); return k }
	xc := with(func(k *fp8Knobs) { k.xc = true })
	allK := int32((fp8PromoMax - 1) << fp8PromoShift)
	for _, c := range []struct {
		name         string
		f            fp8Form
		k            fp8Knobs
		fn           string
		gridX, gridY int
		boxX, boxW   int
		flags        int32
	}{
		{"down, 257 rows", fp8Form{M: 257, N: 2560, K: 9216}, def, "gemm_fp8_wgmma_128x64", 3, 40, 128, 64, allK},
		{"down, 222 rows", fp8Form{M: 222, N: 2560, K: 9216}, def, "gemm_fp8_wgmma_128x40", 2, 64, 128, 40, allK},
		{"gate/up, 222 rows", fp8Form{M: 222, N: 18432, K: 2560, swiglu: true}, def, "gemm_fp8_wgmma_pg128x144", 132, 1, 128, 72, allK},
		{"gate/up, 2,392 rows", fp8Form{M: 2392, N: 18432, K: 2560, swiglu: true}, def, "gemm_fp8_wgmma_pfg128x256", 132, 1, 128, 128, allK},
		{"gate/up, 2,392 rows, 192 wide", fp8Form{M: 2392, N: 18432, K: 2560, swiglu: true}, with(func(k *fp8Knobs) { k.wide = 192 }), "gemm_fp8_wgmma_pfg128x192", 132, 1, 128, 96, allK},
		{"down, 2,392 rows, every k tile promoted", fp8Form{M: 2392, N: 2560, K: 9216}, with(func(k *fp8Knobs) { k.promo = 1 }), "gemm_fp8_wgmma_p128x128", 132, 1, 128, 128, 0},
		{"down, 2,392 rows, the pipelined loop", fp8Form{M: 2392, N: 2560, K: 9216}, with(func(k *fp8Knobs) { k.pipe = true }), "gemm_fp8_wgmma_p128x128", 132, 1, 128, 128, allK | fp8FlagPipe},
		{"down, 2,392 rows, the pipelined loop off", fp8Form{M: 2392, N: 2560, K: 9216, pipe: -1}, with(func(k *fp8Knobs) { k.pipe = true }), "gemm_fp8_wgmma_p128x128", 132, 1, 128, 128, allK},
		{"down, 257 rows, row clusters", fp8Form{M: 257, N: 2560, K: 9216}, with(func(k *fp8Knobs) { k.mc = true }), "gemm_fp8_wgmma_m128x64", 4, 40, 128, 32, allK},
		{"down, 40 rows, half tiles", fp8Form{M: 40, N: 2560, K: 9216}, with(func(k *fp8Knobs) { k.half = true }), "gemm_fp8_wgmma_h128x48", 1, 54, 128, 48, allK},
		// X-sharing clusters: the column tiles along x in whole pairs, half the X rows a copy
		{"down, 257 rows, X clusters", fp8Form{M: 257, N: 2560, K: 9216}, xc, "gemm_fp8_wgmma_x128x64", 40, 3, 64, 64, allK},
		{"down, 222 rows, X clusters", fp8Form{M: 222, N: 2560, K: 4096}, xc, "gemm_fp8_wgmma_x128x40", 64, 2, 64, 40, allK},
		{"an odd number of column tiles", fp8Form{M: 100, N: 5 * 64, K: 256, bn: 64}, xc, "gemm_fp8_wgmma_x128x64", 6, 1, 64, 64, allK},
		{"gated, forced", fp8Form{M: 40, N: 1024, K: 256, bn: 64, swiglu: true, xc: 1}, def, "gemm_fp8_wgmma_xg128x64", 16, 1, 64, 32, allK},
		{"gate/up, 222 rows: more than a round, persistent", fp8Form{M: 222, N: 18432, K: 2560, swiglu: true}, xc, "gemm_fp8_wgmma_pg128x144", 132, 1, 128, 72, allK},
		{"X clusters off", fp8Form{M: 257, N: 2560, K: 9216, xc: -1}, xc, "gemm_fp8_wgmma_128x64", 3, 40, 128, 64, allK},
		{"row clusters win", fp8Form{M: 257, N: 2560, K: 9216}, with(func(k *fp8Knobs) { k.mc, k.xc = true, true }), "gemm_fp8_wgmma_m128x64", 4, 40, 128, 32, allK},
	} {
		l, err := planFP8(c.f, c.k)
		if err != nil {
			t.Errorf("%s: refused on %s: %s", c.name, err.arg, err.reason)
			continue
		}
		if l.fn != c.fn || l.gridX != c.gridX || l.gridY != c.gridY || l.boxX != c.boxX || l.boxW != c.boxW || l.flags != c.flags {
			t.Errorf("%s: %s on %d × %d blocks, boxes of %d X and %d W rows, flags %#x; want %s on %d × %d, %d and %d, %#x",
				c.name, l.fn, l.gridX, l.gridY, l.boxX, l.boxW, l.flags, c.fn, c.gridX, c.gridY, c.boxX, c.boxW, c.flags)
		}
		if l.shared <= 0 || l.shared > 227<<10 {
			t.Errorf("%s: %d bytes of shared memory, want some within a block's 227 KiB", c.name, l.shared)
		}
	}
	for _, c := range []struct {
		name, arg string
		f         fp8Form
	}{
		{"a promotion interval past all", "promo", fp8Form{M: 40, N: 512, K: 256, promo: fp8PromoMax + 1}},
		{"a width without a kernel", "bn", fp8Form{M: 40, N: 512, K: 256, bn: 56}},
		{"a gated width without a kernel", "bn", fp8Form{M: 40, N: 512, K: 256, bn: 40, swiglu: true}},
		{"a FAST width below all of K", "bn", fp8Form{M: 40, N: 512, K: 256, bn: 256, promo: 4}},
		{"row clusters at 40 columns", "bn", fp8Form{M: 257, N: 512, K: 256, bn: 40, mc: 1}},
		{"a persistent kernel at 64 columns", "bn", fp8Form{M: 257, N: 512, K: 256, bn: 64, persist: 1}},
		{"half tiles at 65 rows", "half", fp8Form{M: 65, N: 512, K: 256, bn: 64, half: 1}},
		{"X clusters with row clusters", "xc", fp8Form{M: 257, N: 512, K: 256, bn: 64, xc: 1, mc: 1}},
		{"X clusters persistent", "xc", fp8Form{M: 257, N: 512, K: 256, bn: 64, xc: 1, persist: 1}},
		{"X clusters with half tiles", "xc", fp8Form{M: 40, N: 512, K: 256, bn: 64, xc: 1, half: 1}},
		{"X clusters on a FAST width", "xc", fp8Form{M: 257, N: 512, K: 256, bn: 256, xc: 1, promo: fp8PromoMax}},
	} {
		if _, err := planFP8(c.f, def); err == nil || err.arg != c.arg {
			t.Errorf("%s: %v, want a refusal on %s", c.name, err, c.arg)
		}
	}
}
