//go:build cuda

package kev

import (
	"testing"
	"time"

	"github.com/kevgo/kev/tensor"
)

// TestReplicasCUDA runs two replicas of the model on GPU 0 ("cuda:0,0": two backends, each with its own context,
// weights, prefix cache and model goroutine) under concurrent requests: every request's probabilities are
// bit-identical to those of a single replica running it alone, both replicas answer a share, the device memory
// of both is reported, and "cuda:all" lists every GPU the driver sees.
func TestReplicasCUDA(t *testing.T) {
	n, err := tensor.DeviceCount("cuda")
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount: %d, %v", n, err)
	}
	if rs, err := Device("cuda:all").replicas(); err != nil || len(rs) != n || rs[0].String() != "cuda:0" {
		t.Errorf("cuda:all: %v %v, want %d devices", rs, err, n)
	}
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	alone := loadGolden(t, s, Options{Device: "cuda", DType: "bf16", PrefixCache: -1})
	want := make([][][]float32, len(reqs))
	for i, r := range reqs {
		want[i] = probs(t, alone, r)
	}
	_, _, ok := alone.deviceMemory()
	heldOne, _, _ := alone.deviceMemory()
	if !ok || heldOne <= 0 {
		t.Fatalf("one replica: device memory %d, %v", heldOne, ok)
	}
	p := loadGolden(t, s, Options{Device: "cuda:0,0", DType: "bf16", PrefixCache: 2})
	if info := p.Info(); info.Replicas != 2 {
		t.Fatalf("info %+v", info)
	}
	const goroutines, each = 16, 6
	start := time.Now()
	submitConcurrently(t, p, reqs, want, goroutines, each)
	elapsed := time.Since(start)
	st := p.Stats()
	if st.Batches.Requests != goroutines*each || len(st.Replicas) != 2 {
		t.Fatalf("stats %+v", st)
	}
	for i, r := range st.Replicas {
		t.Logf("replica %d (%s): %d requests in %d batches; cache %d hits %d misses", i, r.Device, r.Batches.Requests,
			r.Batches.Count, r.PrefixCache.Hits, r.PrefixCache.Misses)
		if r.Device != "cuda:0" || r.Batches.Requests == 0 || r.QueuedTokens != 0 {
			t.Errorf("replica %d: %+v", i, r)
		}
	}
	held, _, ok := p.deviceMemory()
	t.Logf("%d requests in %v; device memory %d MiB for two replicas, %d MiB for one", goroutines*each,
		elapsed.Round(time.Millisecond), held>>20, heldOne>>20)
	if !ok || held < heldOne {
		t.Errorf("two replicas: device memory %d, %v; one replica %d", held, ok, heldOne)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestBigRequestDoesNotStarveCUDA is TestBigRequestDoesNotStarve at full size on the GPU: 50,000 questions in the
// default 16,384-token passes.
func TestBigRequestDoesNotStarveCUDA(t *testing.T) {
	if err := starve(t, "cuda", 50000, 0); err != nil {
		t.Error(err)
	}
}
