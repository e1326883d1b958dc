package kev

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Histogram bucket upper bounds.
var (
	// DurationBuckets are the upper bounds, in seconds, of the HTTP request duration histogram.
	DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// ModelLatencyBuckets are the upper bounds, in milliseconds, of the model latency histogram (latency_ms).
	ModelLatencyBuckets = []float64{1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}
	// BatchSizeBuckets are the upper bounds of the batch size histogram (requests per batch; 64 at most in Kev).
	BatchSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64}
)

// Metrics are a server's Prometheus metrics: requests by path, method and status; request duration and model
// latency histograms; requests in flight; batch sizes when whoever runs batches reports them (ObserveBatch); and,
// at scrape time, the model card's counters (batches, queue depth, prefix cache hits and misses, graphs).
// All methods are safe for concurrent use.
type Metrics struct {
	mu        sync.Mutex
	requests  map[requestKey]uint64
	durations map[string]*histogram // by path
	model     *histogram
	batches   *histogram
	inflight  atomic.Int64
}

type requestKey struct {
	path, method string
	status       int
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests:  map[requestKey]uint64{},
		durations: map[string]*histogram{},
		model:     newHistogram(ModelLatencyBuckets),
		batches:   newHistogram(BatchSizeBuckets),
	}
}

// ObserveBatch records one batch of n requests in the batch size histogram.
func (m *Metrics) ObserveBatch(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches.observe(float64(n))
}

func (m *Metrics) observeRequest(path, method string, status int, d time.Duration) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
	default:
		method = "other" // keep label values bounded
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{path, method, status}]++
	h := m.durations[path]
	if h == nil {
		h = newHistogram(DurationBuckets)
		m.durations[path] = h
	}
	h.observe(d.Seconds())
}

func (m *Metrics) observeModel(ms float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.model.observe(ms)
}

// Requests returns the number of requests recorded for a path, method and status.
func (m *Metrics) Requests(path, method string, status int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[requestKey{path, method, status}]
}

// WriteTo writes the metrics in Prometheus text format (version 0.0.4), without the model card's counters.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	var sb strings.Builder
	m.write(&sb, nil)
	n, err := io.WriteString(w, sb.String())
	return int64(n), err
}

// write renders every metric, and the card's counters when card is not nil.
func (m *Metrics) write(sb *strings.Builder, card *ModelCard) {
	m.mu.Lock()
	defer m.mu.Unlock()

	header(sb, "kev_http_requests_total", "counter", "HTTP requests answered, by route path, method and status.")
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		if c := strings.Compare(a.method, b.method); c != 0 {
			return c
		}
		return a.status - b.status
	})
	for _, k := range keys {
		sample(sb, "kev_http_requests_total", labels("path", k.path, "method", k.method, "status", strconv.Itoa(k.status)),
			float64(m.requests[k]))
	}

	header(sb, "kev_http_request_duration_seconds", "histogram", "Time from request to response inside the process, by route path.")
	paths := make([]string, 0, len(m.durations))
	for p := range m.durations {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		m.durations[p].write(sb, "kev_http_request_duration_seconds", "path", p)
	}

	header(sb, "kev_model_latency_ms", "histogram", "Model time of the batch each answered request ran in (latency_ms).")
	m.model.write(sb, "kev_model_latency_ms")

	header(sb, "kev_batch_size", "histogram", "Requests per model batch, as reported by the batcher.")
	m.batches.write(sb, "kev_batch_size")

	header(sb, "kev_http_requests_in_flight", "gauge", "Model requests being answered now.")
	sample(sb, "kev_http_requests_in_flight", "", float64(m.inflight.Load()))

	if card == nil {
		return
	}
	counters := []scalar{
		{"kev_batches_total", "counter", "Model batches run.", float64(card.Batches.Count)},
		{"kev_batched_requests_total", "counter", "Requests run in model batches.", float64(card.Batches.Requests)},
		{"kev_queue_depth", "gauge", "Requests waiting for the model now.", float64(card.Batches.Queued)},
		{"kev_prefix_cache_hits_total", "counter", "Requests whose state prefix was cached.", float64(card.PrefixCache.Hits)},
		{"kev_prefix_cache_misses_total", "counter", "Cacheable requests whose state prefix was not cached.", float64(card.PrefixCache.Misses)},
		{"kev_prefix_cache_states", "gauge", "State prefixes cached now.", float64(card.PrefixCache.CachedStates)},
		{"kev_prefix_cache_size", "gauge", "Most state prefixes the cache holds.", float64(card.PrefixCache.Size)},
		{"kev_prefix_cache_oom_retries_total", "counter", "Batches retried with nothing cached after running out of memory.", float64(card.PrefixCache.OOMRetries)},
	}
	if g := card.CUDAGraphs; g != nil {
		counters = append(counters,
			scalar{"kev_cuda_graphs_captured_total", "counter", "CUDA graphs captured.", float64(g.Captured)},
			scalar{"kev_cuda_graphs_kept", "gauge", "CUDA graphs kept now.", float64(g.Kept)},
			scalar{"kev_cuda_graphs_pending", "gauge", "Graph buckets waiting for capture.", float64(g.Pending)},
			scalar{"kev_cuda_graphs_failed", "gauge", "Graph buckets whose capture failed.", float64(g.Failed)})
	}
	for _, c := range counters {
		header(sb, c.name, c.typ, c.help)
		sample(sb, c.name, "", c.v)
	}
	header(sb, "kev_model_info", "gauge", "The served model; always 1.")
	sample(sb, "kev_model_info", labels("run", card.Run, "base", card.Base, "device", card.Device,
		"backend", card.Backend, "dtype", card.DType), 1)
}

// scalar is one unlabelled sample with its metadata.
type scalar struct {
	name, typ, help string
	v               float64
}

func header(sb *strings.Builder, name, typ, help string) {
	fmt.Fprintf(sb, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func sample(sb *strings.Builder, name, labels string, v float64) {
	sb.WriteString(name)
	if labels != "" {
		sb.WriteByte('{')
		sb.WriteString(labels)
		sb.WriteByte('}')
	}
	sb.WriteByte(' ')
	sb.WriteString(formatValue(v))
	sb.WriteByte('\n')
}

// labels renders name="value" pairs, values escaped as the text format needs.
func labels(kv ...string) string {
	var sb strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(kv[i])
		sb.WriteString(`="`)
		sb.WriteString(labelEscaper.Replace(kv[i+1]))
		sb.WriteByte('"')
	}
	return sb.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// histogram is a cumulative-bucket histogram; its owner holds the lock.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound ≥ v: buckets are "le"
	h.counts[i]++
	h.sum += v
	h.n++
}

func (h *histogram) write(sb *strings.Builder, name string, kv ...string) {
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		sample(sb, name+"_bucket", labels(append(slices.Clone(kv), "le", formatValue(b))...), float64(cum))
	}
	sample(sb, name+"_bucket", labels(append(slices.Clone(kv), "le", "+Inf")...), float64(h.n))
	sample(sb, name+"_sum", labels(kv...), h.sum)
	sample(sb, name+"_count", labels(kv...), float64(h.n))
}
