package server

import (
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/systemone"
)

// TestReplicaMetrics checks that a model running as several replicas has each one's counters in /metrics,
// labelled with its index and device, and in the model card's "replicas" list; one replica adds neither the list
// nor the labelled series' values beyond its own.
func TestReplicaMetrics(t *testing.T) {
	c := testCard
	c.Device = "cuda:0,1"
	c.Replicas = []systemone.ReplicaCounts{
		{Device: "cuda:0", Batches: systemone.BatchCounts{Count: 4, Requests: 5, Queued: 1}, QueuedTokens: 120,
			PrefixCache: systemone.PrefixCacheCounts{Size: 4, MaxTokens: 65536, Hits: 2, Misses: 3, CachedStates: 1}},
		{Device: "cuda:1", Batches: systemone.BatchCounts{Count: 3, Requests: 4}, QueuedTokens: 0,
			PrefixCache: systemone.PrefixCacheCounts{Size: 4, MaxTokens: 65536, Hits: 1, Misses: 2, CachedStates: 1}},
	}
	srv, _ := serve(t, &fakeModel{latency: 1, card: c}, Options{})
	r := httpCall(t, nil, "GET", srv.URL+"/metrics", "")
	for _, line := range []string{
		`kev_batches_total 7`,
		`kev_replica_batches_total{device="cuda:0",replica="0"} 4`,
		`kev_replica_batches_total{device="cuda:1",replica="1"} 3`,
		`kev_replica_requests_total{device="cuda:1",replica="1"} 4`,
		`kev_replica_queue_depth{device="cuda:0",replica="0"} 1`,
		`kev_replica_queued_tokens{device="cuda:0",replica="0"} 120`,
		`kev_replica_prefix_cache_hits_total{device="cuda:0",replica="0"} 2`,
		`kev_replica_prefix_cache_misses_total{device="cuda:1",replica="1"} 2`,
		`kev_replica_prefix_cache_states{device="cuda:1",replica="1"} 1`,
	} {
		if !strings.Contains(r.body, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	checkExposition(t, r.body)
	m := httpCall(t, nil, "GET", srv.URL+"/v1/models", "")
	want := `"replicas":[{"device":"cuda:0","prefix_cache":{"size":4,"min_state_tokens":0,"max_tokens":65536,"hits":2,` +
		`"misses":3,"cached_states":1,"oom_retries":0},"batches":{"count":4,"requests":5,"queued":1},"queued_tokens":120},` +
		`{"device":"cuda:1",`
	if m.status != 200 || !strings.Contains(m.body, want) {
		t.Errorf("model card %d %s\nwant it to hold %s", m.status, m.body, want)
	}

	one := testCard
	one.Replicas = c.Replicas[:1]
	srv1, _ := serve(t, &fakeModel{latency: 1, card: one}, Options{})
	if m := httpCall(t, nil, "GET", srv1.URL+"/v1/models", ""); strings.Contains(m.body, "replicas") {
		t.Errorf("one replica: the card has a replicas list: %s", m.body)
	}
}
