// Command reliability measures how Kev's System One server (package server) holds up against careless and hostile
// clients, in one process with the server on a loopback port:
//
//	go run ./examples/reliability memory    # 64 concurrent 28 MiB over-limit bodies: the server's RSS above idle
//	go run ./examples/reliability slowbody  # a body trickled at 1 byte / 500 ms is cut at the body timeout
//	go run ./examples/reliability drain     # SIGTERM under load: 503 + Connection: close, no request lost
//
// and the modes of attacks.go (render bombs, separate and permute, long ids, connection floods, slow bodies).
//
// It serves the tiny golden checkpoint under testdata/ unless -checkpoint and -base name another. Linux only (it
// reads /proc/self/status).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/server"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: reliability memory|slowbody|drain|renderbomb|separate|permute|qid|connflood|slowbodies [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet("reliability "+mode, flag.ExitOnError)
	ckpt := fs.String("checkpoint", "testdata/golden/tiny-a/kev", "checkpoint directory or hub name")
	base := fs.String("base", "testdata/golden/tiny-a/base", "base model directory or hub name")
	clients := fs.Int("clients", 64, "memory, drain: concurrent clients")
	mib := fs.Int("mib", 28, "memory: body size in MiB")
	retry := fs.Bool("retry", false, "memory: retry a 503 after its Retry-After until answered otherwise")
	inflight := fs.Int64("max-inflight-bytes", 0, "memory: the server's MaxInflightBytes (0: its default; -1: none)")
	bodyTimeout := fs.Duration("body-timeout", 2*time.Second, "slowbody: the server's BodyTimeout")
	grace := fs.Duration("drain-grace", 2*time.Second, "drain: the server's DrainGrace")
	questions := fs.Int("questions", 1000, "separate: questions")
	conns := fs.Int("conns", 5000, "connflood: silent connections")
	fs.Parse(os.Args[2:])

	p, err := kev.Load(context.Background(), *ckpt, kev.Options{Base: *base, Offline: true})
	if err != nil {
		fail(err)
	}
	defer p.Close()
	opts := server.Options{Logger: slog.New(slog.DiscardHandler), MaxInflightBytes: *inflight, BodyTimeout: *bodyTimeout, DrainGrace: *grace}
	switch mode {
	case "memory":
		err = memory(p, opts, *clients, *mib, *retry)
	case "slowbody":
		err = slowBody(p, opts)
	case "drain":
		err = drain(p, opts, *clients)
	case "renderbomb":
		err = renderBomb(p, opts)
	case "separate":
		err = separate(p, opts, *questions)
	case "permute":
		err = permute(p, opts)
	case "qid":
		err = questionID(p, opts)
	case "connflood":
		err = connFlood(p, opts, *conns)
	case "slowbodies":
		opts.BodyTimeout = 0
		err = slowBodies(p, opts)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "reliability:", err)
	os.Exit(1)
}

// start serves h on a loopback port until ctx ends; done receives what Serve returned.
func start(ctx context.Context, h *server.Handler) (url string, done <-chan error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	ch := make(chan error, 1)
	go func() { ch <- h.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), ch, nil
}

// rss returns this process's resident set (VmRSS) and its peak (VmHWM), in bytes.
func rss() (cur, peak int64) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fail(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || name != "VmRSS" && name != "VmHWM" {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if name == "VmRSS" {
			cur = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return cur, peak
}

// overLimitBody returns a System One request whose state is about mib MiB of words: millions of tokens, far over
// the 65,536-token limit.
func overLimitBody(mib int) []byte {
	words := []string{"the", "order", "shipped", "late", "and", "arrived", "damaged", "refund", "requested", "on",
		"2024-03-07", "customer", "says", "box", "was", "open", "naïve", "café", "résumé", "12", "345", "!", ",", "."}
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	b.WriteString(`{"state":"`)
	for b.Len() < mib<<20 {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	b.WriteString(`","questions":{"q":{"type":"noul","instructions":"Is a refund owed?"}}}`)
	return b.Bytes()
}

const mb = 1 << 20

// memory sends clients concurrent over-limit bodies and samples the process's RSS.
func memory(p *kev.Predictor, opts server.Options, clients, mib int, retry bool) error {
	h := server.New(p, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, _, err := start(ctx, h)
	if err != nil {
		return err
	}
	body := overLimitBody(mib) // shared by every client: counted in the idle level
	runtime.GC()
	debug.FreeOSMemory()
	time.Sleep(300 * time.Millisecond)
	idle, _ := rss()

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			cur, _ := rss()
			if cur > peak.Load() {
				peak.Store(cur)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var mu sync.Mutex
	statuses := map[string]int{}
	var detail string
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: clients}
	client := &http.Client{Transport: tr}
	began := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				resp, err := client.Post(url+"/v1/systemone", "application/json", bytes.NewReader(body))
				key := ""
				after := time.Second
				if err != nil {
					key = "connection error"
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					key = strconv.Itoa(resp.StatusCode)
					if resp.StatusCode == 422 {
						mu.Lock()
						detail = string(b)
						mu.Unlock()
					}
					if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
						after = time.Duration(s) * time.Second
					}
				}
				mu.Lock()
				statuses[key]++
				mu.Unlock()
				if !retry || key == "422" {
					return
				}
				time.Sleep(after)
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	close(stop)
	<-sampled
	tr.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	after, hwm := rss()

	fmt.Printf("%d concurrent %d MiB over-limit bodies (retry on 503: %v), MaxInflightBytes %s\n", clients, mib, retry, limitString(opts.MaxInflightBytes))
	fmt.Printf("  answers: %v in %.1f s\n", statuses, took.Seconds())
	if len(detail) > 120 {
		detail = detail[:120] + "..."
	}
	fmt.Printf("  422 detail: %s\n", detail)
	fmt.Printf("  RSS idle %d MB, peak %d MB (+%d MB above idle; VmHWM %d MB), 2 s after %d MB\n",
		idle/mb, peak.Load()/mb, (peak.Load()-idle)/mb, hwm/mb, after/mb)
	if peak.Load()-idle >= 1<<30 {
		return fmt.Errorf("peak RSS %d MB above idle: over 1 GB", (peak.Load()-idle)/mb)
	}
	return nil
}

func limitString(n int64) string {
	switch {
	case n == 0:
		return fmt.Sprintf("%d (default)", server.DefaultMaxInflightBytes)
	case n < 0:
		return "none"
	}
	return strconv.FormatInt(n, 10)
}

// slowBody trickles a body at one byte every 500 ms and times the server's answer.
func slowBody(p *kev.Predictor, opts server.Options) error {
	h := server.New(p, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, _, err := start(ctx, h)
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		return err
	}
	defer c.Close()
	began := time.Now()
	fmt.Fprintf(c, "POST /v1/systemone HTTP/1.1\r\nHost: kev\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	go func() {
		for range 1000 {
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	answered := time.Since(began)
	_, rerr := br.ReadByte()
	closed := time.Since(began)
	fmt.Printf("body trickled at 1 byte / 500 ms, BodyTimeout %v\n", opts.BodyTimeout)
	fmt.Printf("  answered %d %s after %.2f s (Connection: close %v); connection closed after %.2f s (%v)\n",
		resp.StatusCode, b, answered.Seconds(), resp.Close, closed.Seconds(), rerr)
	if resp.StatusCode != 408 || answered > opts.BodyTimeout+time.Second {
		return errors.New("the slow body was not cut at the timeout")
	}
	return nil
}

// drain runs clients sending requests back to back over keep-alive connections, sends this process SIGTERM, and
// counts how every request ended.
func drain(p *kev.Predictor, opts server.Options, clients int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	h := server.New(p, opts)
	url, done, err := start(ctx, h)
	if err != nil {
		return err
	}
	// The clients send a short ticket back to back; one long ticket, sent just before SIGTERM, is still in the
	// model when the listener closes.
	ticket := func(lines int) string {
		var sb strings.Builder
		for i := range lines {
			fmt.Fprintf(&sb, "Line %d of a long support ticket about a late order. ", i)
		}
		return fmt.Sprintf(`{"state":%q,"questions":{"refund":{"type":"noul","instructions":"Is a refund owed?"},"team":{"type":"choice","criteria":{"returns":"Exchanges","shipping":"Delivery","billing":"Charges"}}}}`, sb.String())
	}
	short, long := ticket(20), ticket(200)

	var signalled atomic.Int64 // unix nanos of the SIGTERM
	type tally struct{ before200, across200, after200, late200, s503, s503close, refused, lost int }
	var mu sync.Mutex
	var total tally
	var lostErrs []string
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var wg sync.WaitGroup
	for i := range clients + 1 {
		wg.Go(func() {
			if i == clients {
				time.Sleep(800 * time.Millisecond)
			}
			for {
				body := short
				if i == clients {
					body = long
				}
				sentAt := time.Now().UnixNano()
				resp, err := client.Post(url+"/v1/systemone", "application/json", strings.NewReader(body))
				answeredAt := time.Now().UnixNano()
				mu.Lock()
				switch {
				case err != nil && errors.Is(err, syscall.ECONNREFUSED):
					total.refused++
					mu.Unlock()
					return // the listener is closed: a client goes to another replica
				case err != nil:
					total.lost++
					lostErrs = append(lostErrs, err.Error())
					mu.Unlock()
					return
				}
				mu.Unlock()
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				sig := signalled.Load()
				switch {
				case resp.StatusCode == 200 && (sig == 0 || answeredAt < sig):
					total.before200++
				case resp.StatusCode == 200 && sentAt < sig:
					total.across200++
					if answeredAt > sig+int64(opts.DrainGrace) {
						total.late200++
					}
				case resp.StatusCode == 200:
					total.after200++
				case resp.StatusCode == 503:
					total.s503++
					if resp.Close {
						total.s503close++
					}
				default:
					total.lost++
					lostErrs = append(lostErrs, resp.Status)
				}
				mu.Unlock()
				if i == clients {
					return
				}
				if resp.StatusCode == 503 {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(time.Second)
	signalled.Store(time.Now().UnixNano())
	sent := time.Now()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	var readyAfter time.Duration
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 503 {
				readyAfter = time.Since(sent)
				break
			}
		}
		if time.Since(sent) > 5*time.Second {
			return errors.New("/readyz never answered 503")
		}
	}
	wg.Wait()
	if err := <-done; err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Printf("%d keep-alive clients sending back to back and one long request, SIGTERM after 1 s, DrainGrace %v\n", clients, opts.DrainGrace)
	fmt.Printf("  /readyz 503 after %v; Serve returned after %.2f s\n", readyAfter.Round(time.Microsecond), time.Since(sent).Seconds())
	fmt.Printf("  200: %d answered before SIGTERM, %d in flight at SIGTERM (%d of them answered after the listener closed), %d sent after it\n",
		total.before200, total.across200, total.late200, total.after200)
	fmt.Printf("  503: %d (%d with Connection: close); refused once the listener closed: %d; lost: %d\n",
		total.s503, total.s503close, total.refused, total.lost)
	if total.lost > 0 {
		return fmt.Errorf("lost requests: %v", lostErrs)
	}
	return nil
}
