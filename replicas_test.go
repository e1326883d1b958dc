package kev

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// slowBackend is the CPU backend without its optional interfaces, taking slowPerToken more for every token it
// embeds: a replica as slow as a real model, so that requests queue and the dispatcher has to choose.
type slowBackend struct{ tensor.Backend }

const (
	slowName     = "cpu-slow"
	slowPerToken = 20 * time.Microsecond
)

func init() {
	tensor.Register(slowName, func() (tensor.Backend, error) { return slowBackend{cpu.New()}, nil })
}

func (b slowBackend) Embedding(table tensor.Tensor, ids []int32) (tensor.Tensor, error) {
	time.Sleep(time.Duration(len(ids)) * slowPerToken)
	return b.Backend.Embedding(table, ids)
}

// holdReplicas makes the replicas of the next predictor loaded wait before taking work until release is called:
// replicas listed in warm first take one batch (a warm-up request each).
func holdReplicas(t *testing.T, warm ...int) (release func()) {
	t.Helper()
	hold := make(chan struct{})
	var mu sync.Mutex
	takes := map[int]int{}
	testBeforeTake = func(replica int) {
		mu.Lock()
		takes[replica]++
		n := takes[replica]
		mu.Unlock()
		free := 1
		for _, w := range warm {
			if w == replica {
				free = 2
			}
		}
		if n == free {
			<-hold
		}
	}
	t.Cleanup(func() { testBeforeTake = nil })
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	return release
}

// queuedOn returns how many requests each replica has queued.
func queuedOn(p *Predictor) []int {
	out := make([]int, len(p.engines))
	for i, e := range p.engines {
		e.mu.Lock()
		out[i] = len(e.queue)
		e.mu.Unlock()
	}
	return out
}

// TestReplicasNoLoss sends many requests from many goroutines to three slow CPU replicas: every request is
// answered once, with exactly the probabilities it gets alone on one replica; each replica answers a share; and
// when all is done no replica has requests or tokens left on its books.
func TestReplicasNoLoss(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := smallRequests(t, s)
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	want := make([][][]float32, len(reqs))
	for i, r := range reqs {
		want[i] = probs(t, alone, r)
	}
	p := loadGolden(t, s, Options{Device: slowName + "," + slowName + "," + slowName, DType: "fp32", PrefixCache: 2, MaxBatch: 4})
	if info := p.Info(); info.Replicas != 3 || info.Device != "cpu-slow,cpu-slow,cpu-slow" {
		t.Fatalf("info %+v", info)
	}
	const goroutines, each = 24, 4
	answered := submitConcurrently(t, p, reqs, want, goroutines, each)
	total := 0
	for _, n := range answered {
		total += n
	}
	st := p.Stats()
	if total != goroutines*each || st.Batches.Requests != total || len(st.Replicas) != 3 {
		t.Fatalf("%d answered, stats %+v", total, st)
	}
	sum := 0
	for i, r := range st.Replicas {
		t.Logf("replica %d (%s): %d requests in %d batches; cache %d hits %d misses", i, r.Device, r.Batches.Requests,
			r.Batches.Count, r.PrefixCache.Hits, r.PrefixCache.Misses)
		sum += r.Batches.Requests
		if r.Device != slowName {
			t.Errorf("replica %d device %q", i, r.Device)
		}
		if r.Batches.Requests < total/12 {
			t.Errorf("replica %d answered %d of %d requests", i, r.Batches.Requests, total)
		}
		if r.QueuedTokens != 0 || r.Batches.Queued != 0 {
			t.Errorf("replica %d: %d tokens, %d requests still on its books", i, r.QueuedTokens, r.Batches.Queued)
		}
		if r.PrefixCache.Hits+r.PrefixCache.Misses != r.Batches.Requests {
			t.Errorf("replica %d: %d hits + %d misses for %d requests", i, r.PrefixCache.Hits, r.PrefixCache.Misses, r.Batches.Requests)
		}
	}
	if sum != total {
		t.Errorf("replicas answered %d, want %d", sum, total)
	}
}

// TestDispatchLeastTokens holds three replicas and queues requests one by one: each goes to the replica with the
// fewest tokens queued once its own are added, a request whose state is already queued at a replica costing only
// its rows there; then every request is answered where it was sent.
func TestDispatchLeastTokens(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	release := holdReplicas(t)
	p := loadGolden(t, s, Options{Device: "cpu,cpu,cpu", PrefixCache: -1})
	// Golden 1 is 573 tokens (state 360), golden 5 102 (state 11), golden 0 135 (state 27).
	steps := []struct {
		golden int
		queued []int // requests per replica after it
	}{
		{1, []int{1, 0, 0}}, // all idle: the first replica
		{5, []int{1, 1, 0}}, // 573+102 > 0+102
		{0, []int{1, 1, 1}}, // replica 2 is idle
		{5, []int{1, 2, 1}}, // its state is queued at replica 1: 102+91 < 135+102 < 573+102
		{0, []int{1, 2, 2}}, // its state is queued at replica 2: 135+108 < 193+135
	}
	var wg sync.WaitGroup
	results := make([]result, 0, 6)
	var mu sync.Mutex
	submit := func(k int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, r, err := p.submit(context.Background(), reqs[k])
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
	}
	for i, st := range steps {
		submit(st.golden)
		waitAccepted(t, p, i+1)
		if got := queuedOn(p); fmt.Sprint(got) != fmt.Sprint(st.queued) {
			t.Fatalf("after request %d (golden %d): queued %v, want %v", i, st.golden, got, st.queued)
		}
	}
	loads := []int{p.engines[0].load(), p.engines[1].load(), p.engines[2].load()}
	if fmt.Sprint(loads) != "[573 193 243]" {
		t.Errorf("queued tokens %v, want [573 193 243]", loads)
	}
	submit(0) // 193+135 = 328 at replica 1, 243+108 = 351 at replica 2 (its state queued there)
	waitAccepted(t, p, len(steps)+1)
	if got := queuedOn(p); fmt.Sprint(got) != "[1 3 2]" {
		t.Errorf("after the last request: queued %v, want [1 3 2]", got)
	}
	release()
	wg.Wait()
	if len(results) != len(steps)+1 {
		t.Fatalf("%d answered", len(results))
	}
	for i, r := range p.Stats().Replicas {
		if want := []int{1, 3, 2}[i]; r.Batches.Requests != want || r.QueuedTokens != 0 {
			t.Errorf("replica %d: %d requests answered (want %d), %d tokens left", i, r.Batches.Requests, want, r.QueuedTokens)
		}
	}
}

// TestPrefixAffinity checks that a request goes to the replica that has its state cached while that replica's
// queue is shorter by less than the state, and elsewhere once it is not: the state is a cache hit there.
func TestPrefixAffinity(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	a := reqs[1] // state 360 tokens, rows 213
	release := holdReplicas(t, 0)
	p := loadGolden(t, s, Options{Device: "cpu,cpu"})
	want := probs(t, p, a) // replica 0 (both idle), which caches the state
	if st := p.Stats().Replicas; st[0].PrefixCache.CachedStates != 1 || st[1].Batches.Requests != 0 {
		t.Fatalf("warm-up: %+v", st)
	}
	var wg sync.WaitGroup
	for i, queued := range []string{"[1 0]", "[2 0]", "[2 1]"} { // 213 < 573; 426 < 573; 639 > 573
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := probs(t, p, a); !equalProbs(got, want) {
				t.Errorf("request %d: %v, want %v", i, got, want)
			}
		}()
		waitAccepted(t, p, 2+i)
		if got := fmt.Sprint(queuedOn(p)); got != queued {
			t.Fatalf("after request %d: queued %s, want %s", i, got, queued)
		}
	}
	release()
	wg.Wait()
	st := p.Stats().Replicas
	if st[0].PrefixCache.Hits != 2 || st[0].PrefixCache.Misses != 1 || st[1].PrefixCache.Hits != 0 || st[1].PrefixCache.Misses != 1 {
		t.Errorf("replica 0 %+v, replica 1 %+v", st[0].PrefixCache, st[1].PrefixCache)
	}
}

// TestDeviceList reads device lists: a bare number continues the backend before it, "all" asks the backend how
// many devices it has, and every entry must name the same backend.
func TestDeviceList(t *testing.T) {
	for _, c := range []struct {
		in   Device
		want string
	}{
		{"cpu", "[cpu]"},
		{"cpu:0", "[cpu:0]"},
		{"cpu:all", "[cpu:0]"},
		{"cpu,cpu", "[cpu cpu]"},
		{"cpu:0,0", "[cpu:0 cpu:0]"},
		{"cpu:0,cpu:0", "[cpu:0 cpu:0]"},
	} {
		rs, err := c.in.replicas()
		if err != nil || fmt.Sprint(rs) != c.want {
			t.Errorf("%q: %v %v, want %s", c.in, rs, err, c.want)
		}
	}
	for _, bad := range []Device{"", "cpu,", ",cpu", "cpu:0,,0", "cpu:x", "cpu:-1", "cpu:01", "cpu," + eachName, "tpu:all", "cpu:0,all"} {
		if rs, err := bad.replicas(); err == nil {
			t.Errorf("%q: %v, want an error", bad, rs)
		}
	}
}

// bigRequest returns req with its questions repeated n times under new ids.
func bigRequest(req *systemone.Request, n int) *systemone.Request {
	out := &systemone.Request{Model: req.Model, State: req.State}
	for k := range n {
		for _, q := range req.Questions {
			out.Questions = append(out.Questions, systemone.QuestionEntry{ID: fmt.Sprintf("%s_%d", q.ID, k), Question: q.Question})
		}
	}
	return out
}

// FuzzDeviceList reads any Device text without panicking; a list it accepts names one registered backend and no
// negative device.
func FuzzDeviceList(f *testing.F) {
	for _, s := range []string{"cpu", "cuda:0,1", "cpu:all", "cpu:0,0", "cpu,", ":", "0", "cpu:0,x:1", "cpu:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := Device(s).replicas()
		if err != nil {
			return
		}
		if len(rs) == 0 {
			t.Fatalf("%q: no replicas and no error", s)
		}
		for _, r := range rs {
			if r.name != rs[0].name || r.ordinal < 0 {
				t.Fatalf("%q: %v", s, rs)
			}
		}
	})
}
