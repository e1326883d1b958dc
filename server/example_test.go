package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/server"
)

// ExampleNew serves the small test checkpoint over loopback HTTP and asks it one question.
func ExampleNew() {
	p, err := kev.Load(context.Background(), "../testdata/golden/tiny-a/kev",
		kev.Options{Base: "../testdata/golden/tiny-a/base", Offline: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	srv := httptest.NewServer(server.New(p, server.Options{APIKey: "local", Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/systemone",
		strings.NewReader(`{"state":"I was charged twice.","questions":{"billing":{"type":"noul","instructions":"About billing?"}}}`))
	req.Header.Set("Authorization", "Bearer local")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var out struct {
		Model   string `json:"model"`
		Answers map[string]struct {
			Type string `json:"type"`
		} `json:"answers"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	fmt.Println(resp.StatusCode, out.Model, out.Answers["billing"].Type)
	// Output: 200 kev-latest noul
}

// ExampleHandler_Serve serves with the handler's own limits until ctx ends, then drains: /readyz and new model
// requests answer 503 with Connection: close for the grace while requests in flight finish.
func ExampleHandler_Serve() {
	p, err := kev.Load(context.Background(), "../testdata/golden/tiny-a/kev",
		kev.Options{Base: "../testdata/golden/tiny-a/base", Offline: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	h := server.New(p, server.Options{
		Logger:      slog.New(slog.DiscardHandler),
		BodyTimeout: 10 * time.Second, // slower bodies get 408
		MaxConns:    256,
		DrainGrace:  time.Second, // in production: longer than the load balancer takes to see /readyz fail
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background()) // in a service: signal.NotifyContext(ctx, syscall.SIGTERM)
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	ready := func() int {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println("ready:", ready())
	stop()
	for i := 0; i < 100 && ready() == 200; i++ {
		time.Sleep(5 * time.Millisecond) // Serve sees ctx end
	}
	fmt.Println("draining:", ready())
	fmt.Println("served:", <-served)
	// Output:
	// ready: 200
	// draining: 503
	// served: <nil>
}
