package kev

import (
	"context"
	"errors"

	"github.com/kevgo/kev/internal/systemone"
)

// probabilities answers a request as Do does, through the same queue, batches and prefix cache, and returns the
// model's probabilities unrounded: per question in request order, per option in option order (a noul's are
// P(no), P(yes); a score's are per level, lowest first). They are the float32 values the answers are computed
// from. Errors are Do's.
func (p *Predictor) probabilities(ctx context.Context, req *systemone.Request) ([][]float32, error) {
	_, _, r, err := p.submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.probs, nil
}

// deviceMemory reports the memory the predictor's tensor backends hold from their devices, summed over the
// replicas: held is all of it (weights, cached states, buffers kept for reuse), free the part of held kept for
// reuse. ok is false for a backend that does not report it, such as the CPU's, whose memory is the Go heap.
func (p *Predictor) deviceMemory() (held, free int64, ok bool) {
	for _, e := range p.engines {
		h, f, eok := e.deviceMemory()
		if !eok {
			return 0, 0, false
		}
		held, free = held+h, free+f
	}
	return held, free, len(p.engines) > 0
}

// Probabilities answers a request as Do does, through the same queue, batches and prefix cache, and returns the
// model's probabilities unrounded, for calibration and evaluation: per question in request order, per option in
// option order (a noul's are P(no), P(yes); a score's are per level, lowest first). They are the float32 values
// the answers are computed from. Errors are Do's.
func (p *Predictor) Probabilities(ctx context.Context, req *Request) ([][]float32, error) {
	if req == nil {
		return nil, errors.New("kev: Probabilities: nil request")
	}
	probs, err := p.probabilities(ctx, toSysRequest(req))
	return probs, publicError(err)
}
