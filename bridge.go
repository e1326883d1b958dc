package kev

import (
	"context"

	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/systemone"
)

func init() {
	bridge.Predictor = func(p any) bridge.Model { return protocolModel{p.(*Predictor)} }
}

// protocolModel is a Predictor at the protocol level, for package server and the kev command.
type protocolModel struct{ p *Predictor }

func (m protocolModel) Do(ctx context.Context, req *systemone.Request) (*systemone.Response, error) {
	return m.p.do(ctx, req)
}

func (m protocolModel) Probabilities(ctx context.Context, req *systemone.Request) ([][]float32, error) {
	return m.p.probabilities(ctx, req)
}

func (m protocolModel) Card() systemone.ModelCard { return cardOf(m.p.Info(), m.p.Stats()) }

func (m protocolModel) Tokenizer() systemone.Tokenizer { return m.p.tok }

func (m protocolModel) DeviceMemory() (held, free int64, ok bool) { return m.p.deviceMemory() }

func (m protocolModel) OnBatch(f func(int)) {
	if f == nil {
		m.p.onBatch.Store(nil)
		return
	}
	m.p.onBatch.Store(&f)
}

// cardOf returns the model card of a predictor's Info and Stats.
func cardOf(info Info, st Stats) systemone.ModelCard {
	c := systemone.ModelCard{
		Run: info.Run, Base: info.Base, ReleaseDate: info.ReleaseDate, LoRA: info.LoRA, Device: string(info.Device),
		Backend: info.Backend, DType: string(info.DType), Temperature: info.Temperature, MaxStateTokens: info.MaxStateTokens,
		TruncateStates: info.TruncateStates,
		PrefixCache:    prefixCacheCounts(st.PrefixCache),
		Batches:        batchCounts(st.Batches),
	}
	for _, r := range st.Replicas {
		c.Replicas = append(c.Replicas, systemone.ReplicaCounts{Device: string(r.Device),
			PrefixCache: prefixCacheCounts(r.PrefixCache), Batches: batchCounts(r.Batches), QueuedTokens: r.QueuedTokens})
	}
	if g := st.Graphs; g != nil {
		c.CUDAGraphs = &systemone.GraphCounts{Captured: g.Captured, Kept: g.Kept, Pending: g.Pending, Failed: g.Failed,
			Replays: g.Replays, Eager: g.Eager}
	}
	return c
}

func prefixCacheCounts(pc PrefixCacheStats) systemone.PrefixCacheCounts {
	return systemone.PrefixCacheCounts{Size: pc.Size, MinStateTokens: pc.MinStateTokens, MaxTokens: pc.MaxTokens,
		Hits: int64(pc.Hits), Misses: int64(pc.Misses), CachedStates: pc.CachedStates, OOMRetries: int64(pc.OOMRetries)}
}

func batchCounts(b BatchStats) systemone.BatchCounts {
	return systemone.BatchCounts{Count: int64(b.Count), Requests: int64(b.Requests), Queued: b.Queued}
}
