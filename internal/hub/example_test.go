package hub_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/kevgo/kev/internal/hub"
)

// A snapshot that Python's huggingface_hub left in the cache is used as is,
// without the network.
func ExampleResolve() {
	cache, _ := os.MkdirTemp("", "hub-example")
	defer os.RemoveAll(cache)

	// The layout huggingface_hub writes.
	commit := "139fdd94f1b6a6ad80cc15e08fcb99cac885a101"
	repo := filepath.Join(cache, "models--jaredpalmer--kev-4b")
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
	os.MkdirAll(filepath.Join(repo, "snapshots", commit), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)
	os.WriteFile(filepath.Join(repo, "blobs", "6e1f5d"), []byte(`{"r": 16}`), 0o644)
	os.Symlink("../../blobs/6e1f5d", filepath.Join(repo, "snapshots", commit, "adapter_config.json"))

	dir, err := hub.Resolve(context.Background(), "jaredpalmer/kev-4b", hub.Options{
		CacheDir: cache,
		Offline:  true,
		Required: []string{"adapter_config.json"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	rel, _ := filepath.Rel(cache, dir)
	cfg, _ := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	fmt.Println(filepath.ToSlash(rel))
	fmt.Println(string(cfg))
	// Output:
	// models--jaredpalmer--kev-4b/snapshots/139fdd94f1b6a6ad80cc15e08fcb99cac885a101
	// {"r": 16}
}

// Fetch downloads what the cache lacks from the Hub's HTTP API; here a
// stand-in Hub with one small file.
func ExampleFetch() {
	const commit = "1001bb4d826a52d1f399e183466143f4da7b741b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/models/acme/tiny/revision/main":
			io.WriteString(w, `{"id": "acme/tiny", "sha": "`+commit+`", "lastModified": "2026-10-01T00:00:00.000Z",
				"siblings": [{"rfilename": "config.json"}, {"rfilename": "README.md"}]}`)
		case "/acme/tiny/resolve/" + commit + "/config.json":
			w.Header().Set("X-Repo-Commit", commit)
			w.Header().Set("ETag", `"d0c4b3a9e2f1"`)
			w.Header().Set("Content-Length", "2")
			io.WriteString(w, "{}")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cache, _ := os.MkdirTemp("", "hub-example")
	defer os.RemoveAll(cache)

	snap, err := hub.Fetch(context.Background(), "acme/tiny", hub.Options{
		CacheDir: cache,
		Endpoint: srv.URL,
		Progress: io.Discard,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	link, _ := os.Readlink(filepath.Join(snap.Dir, "config.json"))
	ref, _ := os.ReadFile(filepath.Join(cache, "models--acme--tiny", "refs", "main"))
	fmt.Println(snap.Commit == commit, strings.Join(snap.Files, " "), snap.LastModified.Format("2006-01-02"))
	fmt.Println(link, string(ref) == commit)
	// Output:
	// true config.json 2026-10-01
	// ../../blobs/d0c4b3a9e2f1 true
}

func ExampleParseName() {
	ref, _ := hub.ParseName("Qwen/Qwen3.5-4B-Base@1001bb4d826a52d1f399e183466143f4da7b741b")
	fmt.Println(ref.Repo, hub.IsCommit(ref.Revision), ref.CacheFolder())
	_, err := hub.ParseName("acme/kev@../../etc")
	fmt.Println(err)
	// Output:
	// Qwen/Qwen3.5-4B-Base true models--Qwen--Qwen3.5-4B-Base
	// hub: bad revision "../../etc": contains '..'
}
