package server

import (
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kevgo/kev/internal/systemone"
)

// Histogram bucket upper bounds.
var (
	durationBuckets     = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}      // seconds
	modelLatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30} // s
	batchSizeBuckets    = []float64{1, 2, 4, 8, 16, 32, 64}                                                     // requests; 64 at most in Kev
)

// metrics are a handler's Prometheus metrics: requests by path, method and status; request duration and model
// latency histograms; requests in flight; batch sizes as the predictor reports them; and, at scrape time, the
// model card's counters (batches, queue depth, prefix cache hits and misses, graphs), and each replica's.
type metrics struct {
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	model     prometheus.Histogram
	batches   prometheus.Histogram
	inflight  prometheus.Gauge

	card  func() systemone.ModelCard
	descs map[string]*prometheus.Desc // the card's metrics by name
	info  *prometheus.Desc
}

// cardMetric is one of the card's counters or gauges.
type cardMetric struct {
	name, help string
	typ        prometheus.ValueType
	value      func(c *systemone.ModelCard) (float64, bool) // false: not sent for this card
}

func always(f func(c *systemone.ModelCard) float64) func(c *systemone.ModelCard) (float64, bool) {
	return func(c *systemone.ModelCard) (float64, bool) { return f(c), true }
}

func graphs(f func(g *systemone.GraphCounts) int) func(c *systemone.ModelCard) (float64, bool) {
	return func(c *systemone.ModelCard) (float64, bool) {
		if c.CUDAGraphs == nil {
			return 0, false
		}
		return float64(f(c.CUDAGraphs)), true
	}
}

var cardMetrics = []cardMetric{
	{"kev_batches_total", "Model batches run.", prometheus.CounterValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.Batches.Count) })},
	{"kev_batched_requests_total", "Requests run in model batches.", prometheus.CounterValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.Batches.Requests) })},
	{"kev_queue_depth", "Requests waiting for the model now.", prometheus.GaugeValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.Batches.Queued) })},
	{"kev_prefix_cache_hits_total", "Requests whose state prefix was cached.", prometheus.CounterValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.PrefixCache.Hits) })},
	{"kev_prefix_cache_misses_total", "Cacheable requests whose state prefix was not cached.", prometheus.CounterValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.PrefixCache.Misses) })},
	{"kev_prefix_cache_states", "State prefixes cached now.", prometheus.GaugeValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.PrefixCache.CachedStates) })},
	{"kev_prefix_cache_size", "Most state prefixes the cache holds.", prometheus.GaugeValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.PrefixCache.Size) })},
	{"kev_prefix_cache_oom_retries_total", "Batches retried with nothing cached after running out of memory.", prometheus.CounterValue,
		always(func(c *systemone.ModelCard) float64 { return float64(c.PrefixCache.OOMRetries) })},
	{"kev_cuda_graphs_captured_total", "CUDA graphs captured.", prometheus.CounterValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Captured })},
	{"kev_cuda_graphs_kept", "CUDA graphs kept now.", prometheus.GaugeValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Kept })},
	{"kev_cuda_graphs_pending", "Graph buckets waiting for capture.", prometheus.GaugeValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Pending })},
	{"kev_cuda_graphs_failed", "Graph buckets whose capture failed.", prometheus.GaugeValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Failed })},
	{"kev_cuda_graph_replays_total", "Parts of passes launched as CUDA graphs.", prometheus.CounterValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Replays })},
	{"kev_cuda_graph_eager_total", "Parts of passes issued eagerly while graphs are on.", prometheus.CounterValue,
		graphs(func(g *systemone.GraphCounts) int { return g.Eager })},
}

// replicaMetric is one of the per-replica counters or gauges of the card, labelled with the replica's index and
// device.
type replicaMetric struct {
	name, help string
	typ        prometheus.ValueType
	value      func(r *systemone.ReplicaCounts) float64
}

var replicaMetrics = []replicaMetric{
	{"kev_replica_batches_total", "Model batches run, per replica.", prometheus.CounterValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.Batches.Count) }},
	{"kev_replica_requests_total", "Requests answered, per replica.", prometheus.CounterValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.Batches.Requests) }},
	{"kev_replica_queue_depth", "Requests waiting for the model now, per replica.", prometheus.GaugeValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.Batches.Queued) }},
	{"kev_replica_queued_tokens", "Tokens of the requests queued or running, per replica.", prometheus.GaugeValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.QueuedTokens) }},
	{"kev_replica_prefix_cache_hits_total", "Requests whose state prefix was cached, per replica.", prometheus.CounterValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.PrefixCache.Hits) }},
	{"kev_replica_prefix_cache_misses_total", "Cacheable requests whose state prefix was not cached, per replica.", prometheus.CounterValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.PrefixCache.Misses) }},
	{"kev_replica_prefix_cache_states", "State prefixes cached now, per replica.", prometheus.GaugeValue,
		func(r *systemone.ReplicaCounts) float64 { return float64(r.PrefixCache.CachedStates) }},
}

func newMetrics(card func() systemone.ModelCard) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kev_http_requests_total",
			Help: "HTTP requests answered, by route path, method and status."}, []string{"path", "method", "status"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kev_http_request_duration_seconds",
			Help: "Time from request to response inside the process, by route path.", Buckets: durationBuckets}, []string{"path"}),
		model: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kev_model_latency_seconds",
			Help: "Model time of the batches each answered request ran in (the response's latency_ms, in seconds).", Buckets: modelLatencyBuckets}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kev_batch_size",
			Help: "Requests per model batch, as reported by the batcher.", Buckets: batchSizeBuckets}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kev_http_requests_in_flight",
			Help: "Model requests being answered now."}),
		card:  card,
		descs: map[string]*prometheus.Desc{},
		info: prometheus.NewDesc("kev_model_info", "The served model; always 1.",
			[]string{"run", "base", "device", "backend", "dtype"}, nil),
	}
	for _, c := range cardMetrics {
		m.descs[c.name] = prometheus.NewDesc(c.name, c.help, nil, nil)
	}
	for _, r := range replicaMetrics {
		m.descs[r.name] = prometheus.NewDesc(r.name, r.help, []string{"replica", "device"}, nil)
	}
	return m
}

// observeRequest counts one answered request.
func (m *metrics) observeRequest(path, method string, status int, d float64) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
	default:
		method = "other" // keep label values bounded
	}
	m.requests.WithLabelValues(path, method, statusText(status)).Inc()
	m.durations.WithLabelValues(path).Observe(d)
}

// Describe sends every metric's description.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.durations.Describe(ch)
	m.model.Describe(ch)
	m.batches.Describe(ch)
	m.inflight.Describe(ch)
	for _, c := range cardMetrics {
		ch <- m.descs[c.name]
	}
	for _, r := range replicaMetrics {
		ch <- m.descs[r.name]
	}
	ch <- m.info
}

// Collect sends the metrics, the card's read now.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.durations.Collect(ch)
	m.model.Collect(ch)
	m.batches.Collect(ch)
	m.inflight.Collect(ch)
	card := m.card()
	for _, c := range cardMetrics {
		if v, ok := c.value(&card); ok {
			ch <- prometheus.MustNewConstMetric(m.descs[c.name], c.typ, v)
		}
	}
	for i := range card.Replicas {
		r := &card.Replicas[i]
		for _, rm := range replicaMetrics {
			ch <- prometheus.MustNewConstMetric(m.descs[rm.name], rm.typ, rm.value(r), strconv.Itoa(i), r.Device)
		}
	}
	ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, card.Run, card.Base, card.Device, card.Backend, card.DType)
}

// slogErrorLog sends promhttp's errors to the handler's logger.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) { l.log.Error("kev: metrics", "err", fmtArgs(v)) }
