package kev

import (
	"context"
	"fmt"
	"strings"

	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// Warm-up state lengths, in repetitions of warmSentence. On a GPU two requests: a short state (a pass of few rows:
// the small-M GEMM schedules, a state shorter than one 64-token DeltaNet chunk) and one of about 700 tokens (several
// chunks, the long-pass schedules), so that the kernels, workspaces and tensor maps of short and long requests are
// all in place. On the CPU, where little is done once, only the short one, to keep Load quick.
const (
	warmSentence    = "The order arrived two weeks late and the customer asks whether a refund is possible. "
	warmRepeatsLong = 40
	warmPassesEach  = 2 // passes one warm-up request runs (see engine.warmUp)
)

// warmLengths returns the warm-up state lengths, in repetitions of warmSentence, for a backend.
func warmLengths(backend string) []int {
	if testWarmLengths != nil {
		return testWarmLengths
	}
	if backend == "cpu" {
		return []int{1}
	}
	return []int{1, warmRepeatsLong}
}

// warmReplica runs e's warm-up requests (warmLengths), shortest first.
func (p *Predictor) warmReplica(e *engine) error {
	for _, n := range warmLengths(e.backend.Name()) {
		enc, err := p.warmEncoding(n)
		if err != nil {
			return err
		}
		if err := e.warmUp(enc); err != nil {
			return err
		}
	}
	return nil
}

// Test hooks: testSkipWarmUp makes Load skip the warm-up (to compare answers with and without it);
// testWarmLengths, when set, replaces warmLengths' answer (the GPU's several lengths, on the CPU).
var (
	testSkipWarmUp  bool
	testWarmLengths []int
)

// warmEncoding returns the made-up request a replica answers inside Load, encoded: a state of repeats sentences and
// two questions (a yes/no and a choice), so that both pointer-head forms run.
func (p *Predictor) warmEncoding(repeats int) (*systemone.Encoding, error) {
	req := toSysRequest(&Request{
		State: Text(strings.Repeat(warmSentence, repeats)),
		Questions: []QuestionEntry{
			Noul("refund", "Does the customer ask for a refund?"),
			Choice("tone", "How does the customer sound?", Opt("calm", ""), Opt("upset", "angry or annoyed")),
		},
	})
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{DateFacts: p.opts.DateFacts})
	if err != nil {
		return nil, err
	}
	return systemone.Encode(p.tok, rec, systemone.EncodeOptions{Truncate: true})
}

// warmUp runs, on the calling goroutine before the engine's loop starts, the passes of a first request: a new
// state kept with its first question (as a request whose state is not cached runs), then the other question after
// that state (as a cached one runs), each with the pointer head, and throws the results away. What a backend does
// once — looking up kernels, sizing its workspaces, encoding the weights' tensor maps, pooling memory — so happens
// in Load, not in the first request. It touches neither the prefix cache nor any counter of Stats, and hands the
// pooled memory back as after any request.
func (e *engine) warmUp(enc *systemone.Encoding) error {
	c := newCall(context.Background(), enc)
	if len(c.rows) < 2 {
		return fmt.Errorf("kev: warm-up request has %d question rows, want 2", len(c.rows))
	}
	batch := []chunk{{c: c, to: len(c.rows)}}
	var st *layers.State
	defer func() {
		if st != nil {
			st.Free()
		}
	}()
	pass := func(ps *passPlan) error {
		return tensor.Run(e.backend, func() error {
			out, err := e.model.Forward(&ps.batch)
			if err != nil {
				return err
			}
			for _, s := range out.States {
				if s != nil {
					st = s
				}
			}
			err = e.point(out, ps, batch)
			out.Free()
			return err
		})
	}
	first := &passPlan{
		batch: layers.Batch{New: []layers.NewState{{IDs: int32s(enc.StateIDs()), Keep: true}},
			Rows: []layers.Row{{IDs: int32s(c.rows[0].IDs), New: 0}}},
		rows: []rowRef{{req: 0, q: 0}},
	}
	if err := pass(first); err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("kev: internal error: the warm-up pass kept no state")
	}
	rest := &passPlan{}
	for q := 1; q < len(c.rows); q++ {
		rest.batch.Rows = append(rest.batch.Rows, layers.Row{IDs: int32s(c.rows[q].IDs), Cached: st})
		rest.rows = append(rest.rows, rowRef{req: 0, q: q})
	}
	if err := pass(rest); err != nil {
		return err
	}
	for q, pr := range c.probs {
		if len(pr) == 0 {
			return fmt.Errorf("kev: internal error: the warm-up pass answered no probabilities for row %d", q)
		}
	}
	st.Free()
	st = nil
	e.warmPasses += warmPassesEach
	if t, ok := e.backend.(tensor.Trimmer); ok {
		return t.Trim()
	}
	return nil
}
