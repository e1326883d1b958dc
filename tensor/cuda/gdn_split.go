package cuda

// How gdn_rows (kernels/gdn_sm90a.cu) shares its items among blocks. Pure Go without the driver (no build tag), so
// that its tests run anywhere; the launch is in gdn.go.

// gdnGroup selects the grouping of rows: false runs every row as a segment of its own where the rows run in the
// block of the state they continue, and one row a block where gdn_rows runs them (tests compare the two: the bits
// are the same).
var gdnGroup = true

// gdnRowBlk is the number of int32 in a group of gdn_rows's group table (GdnRowBlk).
const gdnRowBlk = 10

// gdnRowSplit splits gdn_rows's items — for each group of blks (gdnRowBlocks), a run of its rows for each of hzn
// (head, column block) pairs: q items in all — among blocks, and sets each group's sixth entry to what the kernel
// finds its blocks' group by. With g > 0, into about g blocks of per = ⌈q/g⌉ consecutive items (the last one
// shorter; each group's first item). With g ≤ 0: where a block for each run fits one per multiprocessor (sms),
// each run into pieces of per rows, per the least that fits (runs; each group's first block), so that no block loads
// two states; else as g = sms, runs of ⌈q/sms⌉ items that cross the runs, the state reloaded where it changes.
// Without grouping, one item a block. Any split computes the same bits.
func gdnRowSplit(blks []int32, hzn, g, sms int) (blocks, per, q int, runs bool) {
	ng := len(blks) / gdnRowBlk
	most := 0
	for e := range ng {
		q += int(blks[gdnRowBlk*e+4]) * hzn
		most = max(most, int(blks[gdnRowBlk*e+4]))
	}
	if q == 0 {
		return 0, 0, 0, false
	}
	if g <= 0 && (ng*hzn <= sms || !gdnGroup) {
		for per = 1; per < most; per++ { // the least per whose pieces fit (one a run at most)
			n := 0
			for e := range ng {
				n += hzn * ((int(blks[gdnRowBlk*e+4]) + per - 1) / per)
			}
			if n <= sms || !gdnGroup {
				break
			}
		}
		for e := range ng {
			blks[gdnRowBlk*e+5] = int32(blocks)
			blocks += hzn * ((int(blks[gdnRowBlk*e+4]) + per - 1) / per)
		}
		return blocks, per, q, true
	}
	if g <= 0 {
		g = sms
	}
	per = (q + min(g, q) - 1) / min(g, q)
	first := 0
	for e := range ng {
		blks[gdnRowBlk*e+5] = int32(first)
		first += int(blks[gdnRowBlk*e+4]) * hzn
	}
	return (q + per - 1) / per, per, q, false
}

// gdnRowWidth is the number of 8-token pieces of the longest entry of a gdn_rows row table (first row, length,
// chunk), 1 to 8: the width of every product of the launch (gdn_rows_e1 … e8).
func gdnRowWidth(rows []int32) int {
	n := 1
	for i := 1; i < len(rows); i += 3 {
		n = max(n, int(rows[i]+7)/8)
	}
	return min(n, 8)
}
