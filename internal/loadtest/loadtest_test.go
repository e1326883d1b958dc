package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer answers like a System One server: 401 without the key, 422 for no questions, else an answer that
// depends only on the body, with a server timing and a model latency.
func fakeServer(t *testing.T, key string, flaky *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Typesafe-Request-Id", "0123456789abcdef0123456789abcdef")
		w.Header().Set("Server-Timing", "app;dur=1.5")
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"questions":{}`) {
			w.WriteHeader(422)
			return
		}
		if flaky != nil && flaky.Add(1)%10 == 0 {
			w.WriteHeader(500)
			return
		}
		time.Sleep(time.Millisecond)
		fmt.Fprintf(w, `{"model":"m","answers":{"q":{"type":"noul","noul":0.%d}},"usage":{},"latency_ms":0.5}`, len(b)%10)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRun(t *testing.T) {
	srv := fakeServer(t, "k", nil)
	rep, err := Run(context.Background(), Config{
		URL: srv.URL, APIKey: "k", Bodies: [][]byte{[]byte(`{"a":1}`), []byte(`{"bb":22}`)},
		Levels: []int{1, 4}, Duration: 200 * time.Millisecond, Warmup: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Levels) != 2 || rep.Levels[0].Concurrency != 1 || rep.Levels[1].Concurrency != 4 {
		t.Fatalf("%+v", rep.Levels)
	}
	for _, lv := range rep.Levels {
		if lv.Requests == 0 || lv.Errors != 0 || lv.RPS <= 0 || lv.P50MS <= 0 || lv.P99MS < lv.P50MS ||
			lv.ProcessP50 != 1.5 || lv.ModelP50 != 0.5 {
			t.Errorf("level %+v", lv)
		}
	}
	if rep.Protocol != (Protocol{Unauthorized: 401, Invalid: 422, RequestID: true, OK: true}) || !rep.AnswersEqual {
		t.Errorf("%+v", rep)
	}
	var back map[string]any
	if err := json.Unmarshal(rep.JSON(), &back); err != nil {
		t.Fatal(err)
	}
	lv := back["levels"].([]any)[0].(map[string]any)
	for _, k := range []string{"concurrency", "requests", "errors", "rps", "p50_ms", "p99_ms", "process_p50", "model_p50"} {
		if _, ok := lv[k]; !ok {
			t.Errorf("level JSON lacks %q", k)
		}
	}
}

func TestRunCountsErrorsAndBudget(t *testing.T) {
	var n atomic.Int64
	srv := fakeServer(t, "", &n)
	rep, err := Run(context.Background(), Config{URL: srv.URL, Bodies: [][]byte{[]byte(`{}`)},
		Levels: []int{3}, Duration: 5 * time.Second, Requests: 40})
	if err != nil {
		t.Fatal(err)
	}
	lv := rep.Levels[0]
	if lv.Requests != 40 || lv.Errors != 4 {
		t.Errorf("%+v", lv)
	}
	if rep.Protocol.Unauthorized != 0 || rep.Protocol.Invalid != 422 || !rep.Protocol.OK {
		t.Errorf("%+v", rep.Protocol)
	}
}

func TestRunBadConfig(t *testing.T) {
	for _, c := range []Config{{}, {URL: "http://x"}, {URL: "http://x", Bodies: [][]byte{nil}, Levels: []int{0}}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct{ q, want float64 }{{0, 15}, {50, 35}, {100, 50}, {25, 20}, {40, 29}, {99, 49.6}} {
		if got := Percentile(xs, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", c.q, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty")
	}
}

func TestServerTiming(t *testing.T) {
	for h, want := range map[string]float64{"app;dur=12.3": 12.3, "db;dur=1, app;dur=0.5": 0.5, "app;desc=x;dur=7": 7} {
		if got := ServerTiming(h); got != want {
			t.Errorf("%q: %v", h, got)
		}
	}
	for _, h := range []string{"", "app", "db;dur=3", "app;dur=x"} {
		if got := ServerTiming(h); !math.IsNaN(got) {
			t.Errorf("%q: %v", h, got)
		}
	}
}

// TestRunReportsFailures checks that failed requests are counted with what the first got, that the table and
// Problems say so, and that an unreachable server is an error rather than a report of errors.
func TestRunReportsFailures(t *testing.T) {
	var n atomic.Int64
	srv := fakeServer(t, "k", &n)
	rep, err := Run(context.Background(), Config{URL: srv.URL, APIKey: "k", Bodies: [][]byte{[]byte(`{"a":1}`)},
		Levels: []int{2}, Duration: 5 * time.Second, Requests: 30})
	if err != nil {
		t.Fatal(err)
	}
	lv := rep.Levels[0]
	if lv.Requests != 30 || lv.Errors != 3 || lv.FirstError != "HTTP 500" {
		t.Errorf("%+v", lv)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"clients  requests  errors", "p50 ms  p99 ms  server p50 ms  model p50 ms\n",
		"concurrency 2: 3 of 30 requests failed; the first: HTTP 500\n", "no key → 401 ok; invalid body → 422 ok; request ids ok"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
	if p := rep.Problems(); len(p) != 1 || p[0] != "3 of 30 requests failed at concurrency 2" {
		t.Errorf("problems %q", p)
	}

	wrongKey, err := Run(context.Background(), Config{URL: srv.URL, APIKey: "wrong", Bodies: [][]byte{[]byte(`{}`)},
		Levels: []int{1}, Requests: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p := wrongKey.Problems(); len(p) != 2 || p[0] != "2 of 2 requests failed at concurrency 1" || p[1] != "an invalid body got 401, want 422" {
		t.Errorf("wrong key: problems %q", p)
	}

	srv.Close()
	if _, err := Run(context.Background(), Config{URL: srv.URL, Bodies: [][]byte{[]byte(`{}`)}, Levels: []int{1}}); err == nil ||
		!strings.Contains(err.Error(), "no System One server answers at "+srv.URL) {
		t.Errorf("closed server: %v", err)
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{" short \n", 10, "short"}, {"abcdef", 3, "abc..."}, {"aé", 2, "a..."}, {"a\xffb", 5, "a?b"}} {
		if got := clip([]byte(c.in), c.n); got != c.want {
			t.Errorf("clip(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
