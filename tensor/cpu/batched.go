package cpu

import (
	"fmt"

	"github.com/kevgo/kev/tensor"
)

// The CPU backend implements tensor.Batched with the same kernels as the
// single-prefix operations, so a segment gives bit for bit what the
// single-prefix operation gives for it alone.
var _ tensor.Batched = (*Backend)(nil)

// convolve runs the depthwise causal convolution with SiLU; segment s reads
// hists[s] ([K−1, C], oldest first) before its first row. Jobs take blocks
// of rows and channels; each output sums its taps oldest first.
func (b *Backend) convolve(xs, ws []float32, n, ch, kw int, starts, ls []int, hists [][]float32) *Tensor {
	const rowBlock, chBlock = 8, 1024
	y := newF32Full(n, ch)       // each job clears its own rows: no serial clear of the whole result
	wt := make([]float32, kw*ch) // wt[j*ch+c] = ws[c*kw+j]: each tap's weights in a row
	for c := 0; c < ch; c++ {
		for j := 0; j < kw; j++ {
			wt[j*ch+c] = ws[c*kw+j]
		}
	}
	rowSeg := make([]int32, n)
	for s, s0 := range starts {
		for t := s0; t < s0+ls[s]; t++ {
			rowSeg[t] = int32(s)
		}
	}
	cbs := (ch + chBlock - 1) / chBlock
	b.parallel(((n+rowBlock-1)/rowBlock)*cbs, 1, func(lo, hi int) {
		for job := lo; job < hi; job++ {
			r0, c0 := job/cbs*rowBlock, job%cbs*chBlock
			c1 := min(c0+chBlock, ch)
			var taps [4][]float32
			for t := r0; t < min(r0+rowBlock, n); t++ {
				s := rowSeg[t]
				s0 := starts[s]
				yr := y.f32[t*ch+c0 : t*ch+c1]
				xr := func(j int) []float32 { // tap j's inputs: row t−(kw−1)+j of the segment or its history
					src := t - s0 - (kw - 1) + j // index within the segment
					if src >= 0 {
						return xs[(s0+src)*ch+c0 : (s0+src)*ch+c1]
					}
					return hists[s][(kw-1+src)*ch+c0 : (kw-1+src)*ch+c1]
				}
				if n8 := (c1 - c0) &^ 7; convFused && useAVX2 && kw == 4 && n8 > 0 {
					// The same arithmetic as below, in one pass: the first n8 channels.
					for j := range taps {
						taps[j] = xr(j)
					}
					convSiLU4AVX2(&yr[0], &taps[0][0], &taps[1][0], &taps[2][0], &taps[3][0],
						&wt[c0], &wt[ch+c0], &wt[2*ch+c0], &wt[3*ch+c0], n8)
					if n8 == c1-c0 {
						continue
					}
					var buf [8]float32 // the tail as mulAdd and siluVec compute it
					for i := n8; i < c1-c0; i++ {
						for j := range taps {
							p := wt[j*ch+c0+i] * taps[j][i]
							buf[i-n8] += p
						}
					}
					siluAVX2(&buf[0], &buf[0], 8)
					copy(yr[n8:], buf[:])
					continue
				}
				clear(yr)
				for j := 0; j < kw; j++ {
					mulAdd(yr, wt[j*ch+c0:j*ch+c1], xr(j))
				}
				siluVec(yr, yr)
			}
		}
	})
	return y
}

// convFused selects convSiLU4AVX2 for four-tap convolutions (the tests turn
// it off to compare its bits with the passes it fuses).
var convFused = true

// lastInputs returns the last K−1 rows of [hist; x] for a history
// [K−1, C] and rows x [*, C].
func lastInputs(hist, x []float32, kw, ch int) []float32 {
	n := len(x) / ch
	out := make([]float32, (kw-1)*ch)
	for r := 0; r < kw-1; r++ {
		src := n - (kw - 1) + r
		if src >= 0 {
			copy(out[r*ch:(r+1)*ch], x[src*ch:(src+1)*ch])
		} else {
			copy(out[r*ch:(r+1)*ch], hist[(kw-1+src)*ch:(kw+src)*ch])
		}
	}
	return out
}

// checkSegments validates segments against n rows and nPrefix prefixes and
// returns their start rows and lengths.
func checkSegments(op string, segs []tensor.Segment, n, nPrefix int) ([]int, []int, error) {
	starts, ls := make([]int, len(segs)), make([]int, len(segs))
	sum := 0
	for i, s := range segs {
		if s.Len < 0 {
			return nil, nil, fmt.Errorf("cpu: %s: segs[%d].Len = %d is negative", op, i, s.Len)
		}
		switch s.From {
		case tensor.FromZero:
		case tensor.FromPrefix:
			if s.Index < 0 || s.Index >= nPrefix {
				return nil, nil, fmt.Errorf("cpu: %s: segs[%d] continues prefix %d of %d", op, i, s.Index, nPrefix)
			}
		case tensor.FromSegment:
			if s.Index < 0 || s.Index >= len(segs) {
				return nil, nil, fmt.Errorf("cpu: %s: segs[%d] continues segment %d of %d", op, i, s.Index, len(segs))
			}
			if segs[s.Index].From != tensor.FromZero {
				return nil, nil, fmt.Errorf("cpu: %s: segs[%d] continues segment %d, which starts %v, not FromZero", op, i, s.Index, segs[s.Index].From)
			}
		default:
			return nil, nil, fmt.Errorf("cpu: %s: segs[%d].From = %v", op, i, s.From)
		}
		starts[i], ls[i] = sum, s.Len
		sum += s.Len
	}
	if sum != n {
		return nil, nil, fmt.Errorf("cpu: %s: segments hold %d rows, the input %d", op, sum, n)
	}
	return starts, ls, nil
}

// prefixRows checks the prefix keys and values of a segmented attention
// call ([P_i, kvw] each, the values as many rows as the keys) and returns
// their float32s.
func prefixRows(op string, kPrefixes, vPrefixes []tensor.Tensor, kvw int) (kps, vps [][]float32, err error) {
	kps, vps = make([][]float32, len(kPrefixes)), make([][]float32, len(kPrefixes))
	for i := range kPrefixes {
		kpt, err := matrix(op, fmt.Sprintf("kPrefixes[%d]", i), kPrefixes[i], -1, kvw)
		if err != nil {
			return nil, nil, err
		}
		vpt, err := matrix(op, fmt.Sprintf("vPrefixes[%d]", i), vPrefixes[i], kpt.shape[0], kvw)
		if err != nil {
			return nil, nil, err
		}
		kps[i], vps[i] = kpt.float32s(), vpt.float32s()
	}
	return kps, vps, nil
}

// prefix sets the keys and values the segment sees before its own rows: a
// prefix of kps and vps, another segment's rows of ks and vs (starts and
// ls place the segments), or none.
func (a *attnSeg) prefix(s tensor.Segment, kps, vps [][]float32, ks, vs []float32, starts, ls []int, kvw int) {
	switch s.From {
	case tensor.FromPrefix:
		a.kp, a.vp = kps[s.Index], vps[s.Index]
		a.p = len(kps[s.Index]) / kvw
	case tensor.FromSegment:
		j := s.Index
		a.kp, a.vp = ks[starts[j]*kvw:(starts[j]+ls[j])*kvw], vs[starts[j]*kvw:(starts[j]+ls[j])*kvw]
		a.p = ls[j]
	}
}

// AttentionSegments is causal grouped-query attention whose segments each
// continue their own prefix.
func (b *Backend) AttentionSegments(q, k, v tensor.Tensor, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, c tensor.AttentionConfig) (tensor.Tensor, error) {
	const op = "AttentionSegments"
	qt, kt, vt, err := attentionInputs(op, q, k, v, c)
	if err != nil {
		return nil, err
	}
	kvw, n := c.KVHeads*c.HeadDim, qt.shape[0]
	if len(kPrefixes) != len(vPrefixes) {
		return nil, fmt.Errorf("cpu: %s: %d key prefixes, %d value prefixes", op, len(kPrefixes), len(vPrefixes))
	}
	starts, ls, err := checkSegments(op, segs, n, len(kPrefixes))
	if err != nil {
		return nil, err
	}
	kps, vps, err := prefixRows(op, kPrefixes, vPrefixes, kvw)
	if err != nil {
		return nil, err
	}
	ks, vs := kt.float32s(), vt.float32s()
	as := make([]attnSeg, len(segs))
	for i, s := range segs {
		as[i] = attnSeg{start: starts[i], n: ls[i], kstart: starts[i], keys: ls[i]}
		as[i].prefix(s, kps, vps, ks, vs, starts, ls, kvw)
	}
	return b.attend(qt.float32s(), ks, vs, n, as, c, nil), nil
}

// CausalConv1dSiLUSegments is the depthwise causal convolution with SiLU
// whose segments each continue their own history.
func (b *Backend) CausalConv1dSiLUSegments(x, w tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment) (tensor.Tensor, []tensor.Tensor, error) {
	const op = "CausalConv1dSiLUSegments"
	xt, err := matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, ch := xt.shape[0], xt.shape[1]
	wt, err := matrix(op, "w", w, ch, -1)
	if err != nil {
		return nil, nil, err
	}
	kw := wt.shape[1]
	if kw < 1 {
		return nil, nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: tensor.Dims(ch, -1) + " with K ≥ 1"}
	}
	starts, ls, err := checkSegments(op, segs, n, len(states))
	if err != nil {
		return nil, nil, err
	}
	prev := make([][]float32, len(states))
	for i, st := range states {
		t, err := matrix(op, fmt.Sprintf("states[%d]", i), st, kw-1, ch)
		if err != nil {
			return nil, nil, err
		}
		prev[i] = t.float32s()
	}
	xs, ws := xt.float32s(), wt.float32s()
	zero := make([]float32, (kw-1)*ch)
	hists := make([][]float32, len(segs))
	for i, s := range segs {
		switch s.From {
		case tensor.FromZero:
			hists[i] = zero
		case tensor.FromPrefix:
			hists[i] = prev[s.Index]
		case tensor.FromSegment:
			j := s.Index
			hists[i] = lastInputs(zero, xs[starts[j]*ch:(starts[j]+ls[j])*ch], kw, ch)
		}
	}
	y := b.convolve(xs, ws, n, ch, kw, starts, ls, hists)
	kept := make([]tensor.Tensor, len(segs))
	for i, s := range segs {
		if s.Keep {
			kept[i] = &Tensor{shape: []int{kw - 1, ch}, dtype: tensor.F32,
				f32: lastInputs(hists[i], xs[starts[i]*ch:(starts[i]+ls[i])*ch], kw, ch)}
		}
	}
	return y, kept, nil
}

// GatedDeltaRuleSegments runs the gated delta rule over segments that each
// start from their own state: first those starting from nothing or from a
// prefix, then those continuing another segment of the call.
func (b *Backend) GatedDeltaRuleSegments(qkv, g, beta tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment, c tensor.DeltaConfig) (tensor.Tensor, []tensor.Tensor, error) {
	const op = "GatedDeltaRuleSegments"
	in, err := b.deltaOperands(op, qkv, g, beta, c)
	if err != nil {
		return nil, nil, err
	}
	defer in.free()
	starts, ls, err := checkSegments(op, segs, in.n, len(states))
	if err != nil {
		return nil, nil, err
	}
	prev := make([][]float32, len(states))
	for i, st := range states {
		if prev[i], err = deltaState(op, fmt.Sprintf("states[%d]", i), st, c); err != nil {
			return nil, nil, err
		}
	}
	hv, dk, dv := in.hv, in.dk, in.dv
	size := hv * dk * dv
	finals := make([][]float32, len(segs))
	for i, s := range segs {
		if s.Keep && finals[i] == nil {
			finals[i] = make([]float32, size)
		}
		if s.From == tensor.FromSegment && finals[s.Index] == nil {
			finals[s.Index] = make([]float32, size)
		}
	}
	out := newF32Full(in.n, hv*dv)
	head := func(st []float32, h int) []float32 {
		if st == nil {
			return nil
		}
		return st[h*dk*dv : (h+1)*dk*dv]
	}
	for _, second := range []bool{false, true} {
		var jobs []deltaJob
		for i, s := range segs {
			if (s.From == tensor.FromSegment) != second {
				continue
			}
			for h := 0; h < hv; h++ {
				jb := deltaJob{h: h, s0: starts[i], l: ls[i], to: head(finals[i], h)}
				switch s.From {
				case tensor.FromPrefix:
					jb.from = head(prev[s.Index], h)
				case tensor.FromSegment:
					jb.from = head(finals[s.Index], h)
				}
				jobs = append(jobs, jb)
			}
		}
		b.runDelta(in, jobs, c.Chunk, out.f32)
	}
	kept := make([]tensor.Tensor, len(segs))
	for i, s := range segs {
		if s.Keep {
			kept[i] = &Tensor{shape: []int{hv, dk, dv}, dtype: tensor.F32, f32: finals[i]}
		}
	}
	return out, kept, nil
}

// SliceRows copies rows [lo, hi) of a matrix, keeping its type.
func (b *Backend) SliceRows(x tensor.Tensor, lo, hi int) (tensor.Tensor, error) {
	const op = "SliceRows"
	xt, err := matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, w := xt.shape[0], xt.shape[1]
	if lo < 0 || hi < lo || hi > m {
		return nil, fmt.Errorf("cpu: %s: rows [%d, %d) outside the %d rows of x", op, lo, hi, m)
	}
	out := &Tensor{shape: []int{hi - lo, w}, dtype: xt.dtype}
	if xt.dtype == tensor.F32 {
		out.f32 = make([]float32, (hi-lo)*w)
		b.parallel(hi-lo, max(1, (1<<16)/max(w, 1)), func(a, z int) { xt.copyRows(out.f32[a*w:z*w], lo+a, lo+z) })
	} else {
		out.bits, out.heap = append([]uint16(nil), xt.halfRows(lo, hi)...), true
	}
	return out, nil
}

// Pointers runs the pointer head for each query, the queries in parallel;
// each gives the bits Pointer gives for it.
func (b *Backend) Pointers(h tensor.Tensor, p *tensor.PointerHead, qs []tensor.PointerQuery) ([][]float32, error) {
	ph, err := pointerInputs("Pointers", h, p)
	if err != nil {
		return nil, err
	}
	out, errs := make([][]float32, len(qs)), make([]error, len(qs))
	serial := func(n, _ int, f func(lo, hi int)) { f(0, n) }
	b.each(len(qs), func() func(int) {
		return func(i int) { out[i], errs[i] = ph.probabilities("Pointers", qs[i].Decide, qs[i].Opts, serial) }
	})
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("cpu: Pointers: query %d: %w", i, err)
		}
	}
	return out, nil
}
