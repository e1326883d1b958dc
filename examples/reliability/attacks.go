package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/server"
)

// Modes that each send one attack on a bound and print the time to the answer (or refusal), the process's peak RSS
// growth, and how a small request beside it fares.
//
//	go run ./examples/reliability renderbomb  # 990 nested objects around an array: 26 KB and 206 KB bodies
//	go run ./examples/reliability separate    # /v1/systemone/separate with 1,000 questions, a small request beside
//	go run ./examples/reliability permute     # n_perm 64 over 255 options, a small request beside
//	go run ./examples/reliability qid         # one 30 MB question id
//	go run ./examples/reliability connflood   # 5,000 silent connections, then a real request
//	go run ./examples/reliability slowbodies  # four 32 MiB bodies sent a byte at a time, then 30 requests

// smallBody is the small request timed beside an attack.
const smallBody = `{"state":"My shoes came in the wrong size.","questions":{"team":{"type":"choice","criteria":{"returns":"Exchanges","billing":"Charges"}}}}`

// postTimed posts body and returns the status, the first 200 bytes of the answer and the time it took.
func postTimed(client *http.Client, url, body string) (int, string, time.Duration, error) {
	start := time.Now()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", time.Since(start), err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(b) > 200 {
		b = append(b[:200], "…"...)
	}
	return resp.StatusCode, string(b), time.Since(start), nil
}

// besides times the small request alone and then beside attack: sent over and over while the attack runs, each
// after a random pause of up to 5 ms so that it arrives at every point of the attack's batches, and prints the
// median, 90th percentile and worst of those answers. Its time alone is the median of 41 sent the same way (a
// request right after another finds the server's threads still awake, one after a pause wakes them: back to back,
// the time alone read 0.8 to 1.5 ms from one run to the next), before the attack and again after it.
func besides(base string, attack func() (int, string, time.Duration, error)) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 { // warm up
		if _, _, _, err := postTimed(client, base+"/v1/systemone", smallBody); err != nil {
			return err
		}
	}
	var alone []time.Duration
	timeAlone := func() error {
		for range 41 {
			time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
			_, _, d, err := postTimed(client, base+"/v1/systemone", smallBody)
			if err != nil {
				return err
			}
			alone = append(alone, d)
		}
		return nil
	}
	if err := timeAlone(); err != nil {
		return err
	}
	runtime.GC()
	_, peak0 := rss()
	type result struct {
		status int
		body   string
		d      time.Duration
		err    error
	}
	res := make(chan result, 1)
	go func() { s, b, d, err := attack(); res <- result{s, b, d, err} }()
	time.Sleep(200 * time.Millisecond) // the attack reaches the server first
	var beside []time.Duration
	statuses := map[int]int{}
	var r result
	for done := false; !done; {
		status, _, d, err := postTimed(client, base+"/v1/systemone", smallBody)
		if err != nil {
			return err
		}
		statuses[status]++
		select {
		case r = <-res:
			done = true // answered after the attack: not beside it
		default:
			beside = append(beside, d)
			time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
		}
	}
	if r.err != nil {
		return r.err
	}
	_, peak := rss()
	fmt.Printf("  attack: %d after %.2f s, peak RSS +%d MiB: %s\n", r.status, r.d.Seconds(), (peak-peak0)>>20, r.body)
	if err := timeAlone(); err != nil {
		return err
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	a := quantiles(alone)
	fmt.Printf("  small request alone: median %s (of %d)\n", ms(a[0]), len(alone))
	if len(beside) == 0 {
		fmt.Printf("  small request beside the attack: none sent before it ended\n")
		return nil
	}
	b := quantiles(beside)
	fmt.Printf("  small request beside the attack: median %s, p90 %s, worst %s (%d sent, statuses %v); median %.1f× alone\n",
		ms(b[0]), ms(b[1]), ms(b[2]), len(beside), statuses, float64(b[0])/float64(a[0]))
	return nil
}

// quantiles returns the median, the 90th percentile and the maximum of ds.
func quantiles(ds []time.Duration) [3]time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return [3]time.Duration{at(0.5), at(0.9), s[len(s)-1]}
}

// serveFor starts a server for p with opts until the returned stop is called.
func serveFor(p *kev.Predictor, opts server.Options) (string, func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	url, done, err := start(ctx, server.New(p, opts))
	if err != nil {
		cancel()
		return "", nil, err
	}
	return url, func() { cancel(); <-done }, nil
}

func renderBomb(p *kev.Predictor, opts server.Options) error {
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	for _, n := range []int{10_000, 100_000} {
		var b strings.Builder
		b.WriteString(`{"state":`)
		b.WriteString(strings.Repeat(`{"a":`, 990))
		b.WriteString("[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]")
		b.WriteString(strings.Repeat("}", 990))
		b.WriteString(`,"questions":{"q":{"type":"noul"}}}`)
		body := b.String()
		fmt.Printf("render bomb: %d-byte body, 990 levels around %d zeros\n", len(body), n)
		if err := besides(url, func() (int, string, time.Duration, error) {
			return postTimed(http.DefaultClient, url+"/v1/systemone", body)
		}); err != nil {
			return err
		}
	}
	return nil
}

func separate(p *kev.Predictor, opts server.Options, questions int) error {
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	var b strings.Builder
	b.WriteString(`{"state":"My order arrived late and the box was open; I want a refund or a new pair.","questions":{`)
	for i := range questions {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"q%d":{"type":"choice","instructions":"Route ticket %d","criteria":{"returns":"Exchanges","shipping":"Delivery","billing":"Charges"}}`, i, i)
	}
	b.WriteString("}}")
	body := b.String()
	fmt.Printf("separate: %d questions, %d-byte body\n", questions, len(body))
	return besides(url, func() (int, string, time.Duration, error) {
		s, out, d, err := postTimed(http.DefaultClient, url+"/v1/systemone/separate", body)
		return s, fmt.Sprintf("%.60s", out), d, err
	})
}

func permute(p *kev.Predictor, opts server.Options) error {
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	var b strings.Builder
	b.WriteString(`{"request":{"state":"s","questions":{"q":{"type":"choice","criteria":{`)
	for i := range 255 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"o%d":null`, i)
	}
	b.WriteString(`}}}},"question":"q","n_perm":64,"seed":1}`)
	body := b.String()
	fmt.Printf("permute: n_perm 64 over 255 options, %d-byte body\n", len(body))
	return besides(url, func() (int, string, time.Duration, error) {
		s, out, d, err := postTimed(http.DefaultClient, url+"/v1/systemone/permute", body)
		return s, fmt.Sprintf("%.60s", out), d, err
	})
}

func questionID(p *kev.Predictor, opts server.Options) error {
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	body := `{"state":"s","questions":{"` + strings.Repeat("x", 30<<20) + `":{"type":"noul"}}}`
	fmt.Printf("question id: one of %d bytes\n", 30<<20)
	return besides(url, func() (int, string, time.Duration, error) {
		return postTimed(http.DefaultClient, url+"/v1/systemone", body)
	})
}

func connFlood(p *kev.Predictor, opts server.Options, conns int) error {
	opts.APIKey = "key"
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	addr := strings.TrimPrefix(url, "http://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	fmt.Printf("connection flood: %d silent connections open (MaxConns %d)\n", len(held), server.DefaultMaxConns)
	start := time.Now()
	req, _ := http.NewRequest("POST", url+"/v1/systemone", strings.NewReader(smallBody))
	req.Header.Set("Authorization", "Bearer key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Printf("  authenticated request: %d after %.1f ms\n", resp.StatusCode, float64(time.Since(start).Microseconds())/1000)
	// Slow headers: as many connections each sending a header line every second.
	for _, c := range held {
		c.Close()
	}
	held = held[:0]
	for range server.DefaultMaxConns + 76 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			break
		}
		fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\n")
		held = append(held, c)
	}
	fmt.Printf("slow headers: %d connections inside their header\n", len(held))
	start = time.Now()
	req, _ = http.NewRequest("POST", url+"/v1/systemone", strings.NewReader(smallBody))
	req.Header.Set("Authorization", "Bearer key")
	resp, err = (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Printf("  authenticated request: %d after %.2f s (ReadHeaderTimeout %v)\n", resp.StatusCode, time.Since(start).Seconds(), server.DefaultReadHeaderTimeout)
	return nil
}

func slowBodies(p *kev.Predictor, opts server.Options) error {
	url, stop, err := serveFor(p, opts)
	if err != nil {
		return err
	}
	defer stop()
	addr := strings.TrimPrefix(url, "http://")
	var wg sync.WaitGroup
	cut := make([]string, 4)
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 32<<20)
		start := time.Now()
		wg.Go(func() {
			go func() {
				for range 10 {
					time.Sleep(10 * time.Second)
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				cut[i] = err.Error()
				return
			}
			resp.Body.Close()
			cut[i] = fmt.Sprintf("%d after %.1f s", resp.StatusCode, time.Since(start).Seconds())
		})
	}
	time.Sleep(time.Second)
	counts := map[int]int{}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 30 {
		s, _, _, err := postTimed(client, url+"/v1/systemone", smallBody)
		if err != nil {
			return err
		}
		counts[s]++
	}
	fmt.Printf("slow bodies: four 32 MiB bodies at a byte every 10 s; 30 requests beside them: %v\n", counts)
	wg.Wait()
	fmt.Printf("  the slow bodies: %v\n", cut)
	return nil
}
