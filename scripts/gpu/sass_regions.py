#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's SASS source page.

Input: the CSV that `ncu --import REPORT --page source --csv --print-source sass` prints for one kernel (a report
recorded with `--set full`, which samples warp stalls). Output, as text:
  1. the stall reasons over all samples, most first;
  2. the kernel cut at its block barriers (BAR.SYNC) and exits: for each stretch, its share of the stall samples
     and of the executed warp instructions, its static length and how often its closing barrier ran. A barrier's
     wait is sampled on the instruction after it, so it counts in the stretch that follows;
  3. the instructions with the most samples, with their three largest reasons.

Usage: sass_regions.py SOURCE.csv [TOP]   (TOP: how many instructions to list, default 25)
"""
import collections
import csv
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    hdr = next((r for r in rows if r and r[0] == "Address"), None)
    if hdr is None:
        sys.exit(f"{sys.argv[1]}: no 'Address' header row (not an ncu --page source --csv file?)")
    ix = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[rows.index(hdr) + 1:] if len(r) == len(hdr)]
    num = lambda r, col: int(r[ix[col]] or 0) if col in ix else 0
    samples, execd = "Warp Stall Sampling (All Samples)", "Instructions Executed"
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    tot_s = sum(num(r, samples) for r in data) or 1
    tot_i = sum(num(r, execd) for r in data) or 1

    by = collections.Counter()
    for r in data:
        for h in reasons:
            by[h] += num(r, h)
    print(f"stall samples {tot_s}, warp instructions executed {tot_i}")
    for h, v in by.most_common(12):
        print(f"  {h[6:]:24s} {100 * v / tot_s:5.1f} %")

    print("\nstretches between barriers (stall %, instruction %, static instructions, closing barrier executed)")
    s = i = n = 0
    start = data[0][ix["Address"]] if data else ""
    for r in data:
        s, i, n = s + num(r, samples), i + num(r, execd), n + 1
        src = r[ix["Source"]]
        if "BAR.SYNC" in src or "EXIT" in src:
            print(f"  {start[-6:]}–{r[ix['Address']][-6:]}  {100 * s / tot_s:5.1f} %  {100 * i / tot_i:5.1f} %  "
                  f"{n:4d}  {num(r, execd)}  {src.strip()[:40]}")
            s = i = n = 0
            start = r[ix["Address"]]
    if n:
        print(f"  {start[-6:]}–end     {100 * s / tot_s:5.1f} %  {100 * i / tot_i:5.1f} %  {n:4d}")

    print(f"\nthe {top} instructions with the most samples")
    for r in sorted(data, key=lambda r: -num(r, samples))[:top]:
        d = sorted(((num(r, h), h[6:]) for h in reasons), reverse=True)[:3]
        print(f"  {100 * num(r, samples) / tot_s:5.2f} %  {r[ix['Address']][-6:]}  {r[ix['Source']].strip()[:60]:60s}  "
              + " ".join(f"{k}={v}" for v, k in d if v))


if __name__ == "__main__":
    main()
