package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

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
