package systemone

import (
	"strconv"

	"github.com/kevgo/kev/internal/pyjson"
)

// ModelCard is the serving description GET /v1/models sends for each model name: what was loaded and how it runs,
// plus live counters.
type ModelCard struct {
	Run            string  // the checkpoint as given (a hub id or a path as typed)
	Base           string  // the base model's name, e.g. Qwen/Qwen3.5-4B-Base
	ReleaseDate    string  // YYYY-MM-DD
	LoRA           int     // the adapter's rank; 0 for a full-weight checkpoint
	Device         string  // cpu, cuda
	Backend        string  // the engine's name
	DType          string  // parameter dtype without prefix: float32, bfloat16, float16, fp8
	Temperature    float64 // the pointer head's temperature
	MaxStateTokens int     // the state limit, the <state> token included
	TruncateStates bool    // whether over-long states are cut instead of refused

	CUDAGraphs  *GraphCounts // nil: no graphs (sent as null)
	PrefixCache PrefixCacheCounts
	Batches     BatchCounts

	// Replicas has each replica's counters when the model runs as several (one per device); the card then ends
	// with a "replicas" list. With one replica the card is Kev's, without it.
	Replicas []ReplicaCounts
}

// ReplicaCounts are one replica's device and counters.
type ReplicaCounts struct {
	Device       string
	PrefixCache  PrefixCacheCounts
	Batches      BatchCounts
	QueuedTokens int // tokens of the requests it has queued or running
}

// GraphCounts are the CUDA graph counters of a card. The card's JSON (Value) holds Kev's four; Replays and Eager
// (the parts of passes launched as graphs and issued eagerly) are served only as metrics.
type GraphCounts struct {
	Captured, Kept, Pending, Failed int
	Replays, Eager                  int
}

// PrefixCacheCounts are the state-prefix cache settings and counters of a card.
type PrefixCacheCounts struct {
	Size, MinStateTokens, MaxTokens int
	Hits, Misses                    int64
	CachedStates                    int
	OOMRetries                      int64
}

// BatchCounts are the batching counters of a card: batches run, requests run in them, requests waiting now.
type BatchCounts struct {
	Count, Requests int64
	Queued          int
}

// ModelNames are the names GET /v1/models lists; both serve the one loaded checkpoint. jev-latest is the TypeSafe
// SDK's default model name, so an unconfigured client works.
var ModelNames = []string{"kev-latest", "jev-latest"}

// Description returns the card's description: "Kev pointer head on <base>, serving <run> at temperature <T>",
// with T to 2 decimals.
func (c *ModelCard) Description() string {
	return "Kev pointer head on " + c.Base + ", serving " + c.Run + " at temperature " +
		strconv.FormatFloat(c.Temperature, 'f', 2, 64)
}

// Value returns the card as Kev's JSON object for the given model name, keys in Kev's order.
func (c *ModelCard) Value(name string) pyjson.Value {
	graphs := pyjson.Null()
	if g := c.CUDAGraphs; g != nil {
		graphs = pyjson.Object(pyjson.M("captured", intv(g.Captured)), pyjson.M("kept", intv(g.Kept)),
			pyjson.M("pending", intv(g.Pending)), pyjson.M("failed", intv(g.Failed)))
	}
	members := []pyjson.Member{
		pyjson.M("name", pyjson.String(name)),
		pyjson.M("description", pyjson.String(c.Description())),
		pyjson.M("release_date", pyjson.String(c.ReleaseDate)),
		pyjson.M("run", pyjson.String(c.Run)),
		pyjson.M("base", pyjson.String(c.Base)),
		pyjson.M("lora", intv(c.LoRA)),
		pyjson.M("device", pyjson.String(c.Device)),
		pyjson.M("backend", pyjson.String(c.Backend)),
		pyjson.M("dtype", pyjson.String(c.DType)),
		pyjson.M("temperature", pyjson.Float(c.Temperature)),
		pyjson.M("max_state_tokens", intv(c.MaxStateTokens)),
		pyjson.M("truncate_states", pyjson.Bool(c.TruncateStates)),
		pyjson.M("cuda_graphs", graphs),
		pyjson.M("prefix_cache", prefixCacheValue(c.PrefixCache)),
		pyjson.M("batches", batchesValue(c.Batches)),
	}
	if len(c.Replicas) > 1 {
		rs := make([]pyjson.Value, len(c.Replicas))
		for i, r := range c.Replicas {
			rs[i] = pyjson.Object(pyjson.M("device", pyjson.String(r.Device)),
				pyjson.M("prefix_cache", prefixCacheValue(r.PrefixCache)), pyjson.M("batches", batchesValue(r.Batches)),
				pyjson.M("queued_tokens", intv(r.QueuedTokens)))
		}
		members = append(members, pyjson.M("replicas", pyjson.Array(rs...)))
	}
	return pyjson.Object(members...)
}

func prefixCacheValue(pc PrefixCacheCounts) pyjson.Value {
	return pyjson.Object(
		pyjson.M("size", intv(pc.Size)), pyjson.M("min_state_tokens", intv(pc.MinStateTokens)),
		pyjson.M("max_tokens", intv(pc.MaxTokens)), pyjson.M("hits", pyjson.Int(pc.Hits)),
		pyjson.M("misses", pyjson.Int(pc.Misses)), pyjson.M("cached_states", intv(pc.CachedStates)),
		pyjson.M("oom_retries", pyjson.Int(pc.OOMRetries)))
}

func batchesValue(b BatchCounts) pyjson.Value {
	return pyjson.Object(pyjson.M("count", pyjson.Int(b.Count)),
		pyjson.M("requests", pyjson.Int(b.Requests)), pyjson.M("queued", intv(b.Queued)))
}

// ModelsValue returns the body of GET /v1/models: {"models": [card as kev-latest, card as jev-latest]}.
func (c *ModelCard) ModelsValue() pyjson.Value {
	cards := make([]pyjson.Value, len(ModelNames))
	for i, n := range ModelNames {
		cards[i] = c.Value(n)
	}
	return pyjson.Object(pyjson.M("models", pyjson.Array(cards...)))
}

func intv(i int) pyjson.Value { return pyjson.Int(int64(i)) }
