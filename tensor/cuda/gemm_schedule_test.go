package cuda

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// tileTiming is one line of testdata/gemm_tiles_h200.txt: a schedule of one GEMM shape and its measured time.
type tileTiming struct {
	run             string
	M, N, K         int
	chunk           int
	tile            string // "128x192", "p128x192" (persistent), "sk"
	splits, skTiles int
	us              float64
}

func readTileTimings(t *testing.T) []tileTiming {
	t.Helper()
	f, err := os.Open("testdata/gemm_tiles_h200.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tileTiming
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Fields(text) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("line %d: field %q is not key=value", line, f)
			}
			kv[k] = v
		}
		num := func(k string, def int) int {
			v, ok := kv[k]
			if !ok {
				return def
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("line %d: %s=%q: %v", line, k, v, err)
			}
			return n
		}
		tt := tileTiming{run: kv["run"], M: num("M", 0), N: num("N", 0), K: num("K", 0), tile: kv["tile"],
			splits: num("splits", 1), skTiles: num("skTiles", 0)}
		tt.chunk = num("chunk", (tt.K+63)/64)
		if tt.us, err = strconv.ParseFloat(kv["us"], 64); err != nil || tt.M <= 0 || tt.N <= 0 || tt.K <= 0 || tt.tile == "" {
			t.Fatalf("line %d: incomplete timing %q", line, text)
		}
		out = append(out, tt)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGEMMScheduleAgainstH200 checks the schedule model against BenchmarkGEMMTiles' timings of every candidate
// schedule on an H200 (Kev-4B's GEMM shapes at the token counts of its passes): where the schedule the model
// picks was measured, it is within 35 % of the fastest one measured at that point, and within 8 % in sum.
// Points are compared within one run's timings, the newest run that has them.
func TestGEMMScheduleAgainstH200(t *testing.T) {
	const sms = 132
	timings := readTileTimings(t)
	type point struct{ M, N, K int }
	byPoint := map[point][]tileTiming{}
	for _, tt := range timings {
		p := point{tt.M, tt.N, tt.K}
		byPoint[p] = append(byPoint[p], tt)
	}
	var sum, best float64
	found, points := 0, 0
	for p, all := range byPoint {
		points++
		run := "a"
		for _, tt := range all {
			if tt.run > run {
				run = tt.run
			}
		}
		c := fixedChunk(p.N, p.K, sms)
		s := schedAt(p.M, p.N, p.K, sms, c)
		fastest, chosen := -1.0, -1.0
		for _, tt := range all {
			if tt.run != run {
				continue
			}
			if fastest < 0 || tt.us < fastest {
				fastest = tt.us
			}
			if tt.chunk != c {
				continue
			}
			switch {
			case s.kern == gemmWGC:
				if tt.tile == fmt.Sprintf("c%dx%d", s.tile.bm, s.tile.bn) {
					chosen = tt.us
				}
			case s.kern == gemmSK:
				if tt.tile == "sk" && tt.skTiles == s.skTiles {
					chosen = tt.us
				}
			case tt.tile == fmt.Sprintf("%dx%d", s.tile.bm, s.tile.bn) && tt.splits == s.splits && s.splits > 1,
				tt.tile == fmt.Sprintf("p%dx%d", s.tile.bm, s.tile.bn) && s.splits == 1,
				tt.tile == fmt.Sprintf("%dx%d", s.tile.bm, s.tile.bn) && s.splits == 1 && run == "a":
				chosen = tt.us
			}
		}
		if chosen < 0 {
			t.Logf("M=%d N=%d K=%d: the model's %v %dx%d, %d splits, chunk %d, %d stream-K tiles was not measured", p.M, p.N, p.K, s.kern, s.tile.bm, s.tile.bn, s.splits, c, s.skTiles)
			continue
		}
		found++
		sum += chosen
		best += fastest
		if chosen > 1.35*fastest {
			t.Errorf("M=%d N=%d K=%d: the model's %v %dx%d (%d splits, chunk %d) took %.1f µs, the fastest measured %.1f µs", p.M, p.N, p.K, s.kern, s.tile.bm, s.tile.bn, s.splits, c, chosen, fastest)
		}
	}
	t.Logf("%d of %d points measured for the model's choice: %.0f µs against the fastest %.0f µs (%.3f×)", found, points, sum, best, sum/best)
	if found < 24 {
		t.Errorf("only %d of %d points have a timing of the model's choice", found, points)
	}
	if sum > 1.08*best {
		t.Errorf("the model's choices take %.0f µs in sum, the fastest measured %.0f µs", sum, best)
	}
}

func TestL2Group(t *testing.T) {
	for _, c := range []struct{ M, bn, K, nT, want int }{
		{16192, 256, 2560, 72, 12},  // Kev-4B gate/up (18432 rows) on 64 requests: 12 × 1.25 MiB of W
		{16192, 256, 2560, 5, 5},    // fewer n-tiles than fit: all of them
		{16192, 128, 9216, 20, 7},   // Kev-4B down projection
		{16192, 256, 200000, 40, 1}, // one tile's W beyond the bound: still one
		{240, 256, 2560, 72, 1},     // X in L2: m-fastest
		{2392, 128, 9216, 20, 7},    // 42 MiB of X
		{2392, 256, 2560, 48, 1},    // 12 MiB of X
	} {
		if got := l2Group(c.M, c.bn, c.K, c.nT); got != c.want {
			t.Errorf("l2Group(%d, %d, %d, %d) = %d, want %d", c.M, c.bn, c.K, c.nT, got, c.want)
		}
	}
}

// TestGEMMScheduleOnePastTiles checks that one row past two 128-row tiles no longer costs a third row of W tiles in
// the schedule model (the 192-row tiles): over Kev-4B's shapes, M = 257 within 1.35× of M = 256 (it was 1.46× with
// 128-row tiles only).
func TestGEMMScheduleOnePastTiles(t *testing.T) {
	shapes := [][2]int{{12352, 2560}, {10240, 2560}, {18432, 2560}, {2560, 9216}, {2560, 4096}}
	var at256, at257 float64
	for _, s := range shapes {
		N, K := s[0], s[1]
		c := fixedChunk(N, K, 132)
		at256 += schedAt(256, N, K, 132, c).us
		at257 += schedAt(257, N, K, 132, c).us
	}
	t.Logf("modelled GEMMs of one layer: %.1f µs at M = 256, %.1f at 257", at256, at257)
	if at257 > 1.35*at256 {
		t.Errorf("M = 257 modelled at %.1f µs against %.1f at 256", at257, at256)
	}
}
