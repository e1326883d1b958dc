package cuda

import (
	"slices"
	"testing"
)

// TestGDNRowSplit walks gdn_rows's blocks as the kernel does (kernels/gdn_sm90a.cu) — each block's group found from the groups' first
// items or blocks, its first item from there, then the items one after another — and checks that they run every
// (group, head and column block, row) item once, in order, for splits into 1 … 300 blocks and as launches split
// them (by runs where a block for each run fits, never loading two states in a block then).
func TestGDNRowSplit(t *testing.T) {
	for _, c := range []struct {
		ns  []int
		hzn int
	}{{[]int{6}, 32}, {[]int{5}, 32}, {[]int{1}, 1}, {[]int{3, 1, 7, 2}, 32}, {[]int{6, 6, 6, 6, 6}, 64}, {[]int{2, 40}, 3}, {make([]int, 70), 2}} {
		for _, g := range []int{1, 2, 3, 7, 132, 300, 0} {
			// the tables as gdnRowBlocks leaves them: each group's entries (first row, length, chunk) from r0 on,
			// the entries numbered from 5; every third group's first item a segment (the kernel's business only)
			var blks, rows []int32
			for e, n := range c.ns {
				if n == 0 { // the 70 groups: 1 … 5 rows
					n = 1 + e%5
					c.ns[e] = n
				}
				blks = append(blks, 0, 0, 0, int32(5+len(rows)/3), int32(n), 0, int32(e%3/2), 0, 0, 0)
				for r := range n {
					rows = append(rows, int32(100*e+r), int32(1+r), int32(7*e+r))
				}
			}
			rows = append(make([]int32, 15), rows...) // entries numbered from 5
			nb, per, q, runs := gdnRowSplit(blks, c.hzn, g, 132)
			covered := make([]bool, q)
			for b := range nb {
				// the kernel's search: the last group whose first item (runs: block) is at or before the block's
				key := b * per
				if runs {
					key = b
				}
				e := -1
				for j := 0; j < len(blks)/gdnRowBlk; j++ {
					if int(blks[gdnRowBlk*j+5]) <= key {
						e++
					}
				}
				n, r0, q0 := int(blks[gdnRowBlk*e+4]), int(blks[gdnRowBlk*e+3]), int(blks[gdnRowBlk*e+5])
				span := n
				if runs {
					span = (n + per - 1) / per
				}
				hz := (key - q0) / span
				r := key - q0 - hz*span
				count := min(per, q-key)
				if runs {
					r *= per
					count = min(per, n-r)
				}
				if count < 1 || hz >= c.hzn || r >= n {
					t.Fatalf("ns %v hzn %d g %d: block %d starts at %v with %d items", c.ns, c.hzn, g, b, [3]int{e, hz, r}, count)
				}
				if want := []int32{int32(100*e + r), int32(1 + r), int32(7*e + r)}; !slices.Equal(rows[3*(r0+r):3*(r0+r)+3], want) {
					t.Fatalf("ns %v hzn %d g %d: block %d's first entry %v, want %v", c.ns, c.hzn, g, b, rows[3*(r0+r):3*(r0+r)+3], want)
				}
				states := 1
				for k := range count {
					// item (e, hz, r) is number Σ_{e' < e} n_e'·hzn + hz·n + r
					at := hz*c.ns[e] + r
					for j := range e {
						at += c.ns[j] * c.hzn
					}
					if covered[at] {
						t.Fatalf("ns %v hzn %d g %d: block %d runs item %d twice", c.ns, c.hzn, g, b, at)
					}
					covered[at] = true
					if r++; r == c.ns[e] {
						r = 0
						if hz++; hz == c.hzn {
							hz, e = 0, e+1
						}
						if k < count-1 {
							states++
						}
					}
				}
				if runs && states > 1 {
					t.Fatalf("ns %v hzn %d g %d: block %d of a split by runs loads %d states", c.ns, c.hzn, g, b, states)
				}
			}
			for at, ok := range covered {
				if !ok {
					t.Fatalf("ns %v hzn %d g %d (runs %v, per %d, %d blocks): item %d of %d never runs", c.ns, c.hzn, g, runs, per, nb, at, q)
				}
			}
			if g > 0 && (runs || nb > g) || g <= 0 && nb > 132 {
				t.Fatalf("ns %v hzn %d g %d: %d blocks (runs %v)", c.ns, c.hzn, g, nb, runs)
			}
			if g <= 0 && runs != (len(c.ns)*c.hzn <= 132) {
				t.Fatalf("ns %v hzn %d: split by runs %v", c.ns, c.hzn, runs)
			}
		}
	}
}

// TestGDNRowWidth checks the width of gdn_rows's products: the 8-token pieces of a table's longest entry.
func TestGDNRowWidth(t *testing.T) {
	for _, c := range []struct {
		lens []int32
		want int
	}{
		{nil, 1},
		{[]int32{1}, 1},
		{[]int32{8}, 1},
		{[]int32{9}, 2},
		{[]int32{13, 40, 33}, 5},
		{[]int32{48, 41}, 6},
		{[]int32{57, 2}, 8},
		{[]int32{64}, 8},
	} {
		var rows []int32
		for i, n := range c.lens {
			rows = append(rows, int32(100*i), n, int32(i))
		}
		if got := gdnRowWidth(rows); got != c.want {
			t.Errorf("lengths %v: width %d, want %d", c.lens, got, c.want)
		}
	}
}
