package hub

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHardeningRefEcho: a refs/ file that is not a commit is reported with
// a short quoted prefix, however large it is (5 MB used to be echoed whole).
func TestHardeningRefEcho(t *testing.T) {
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	opts.Offline = true
	writePythonCache(t, h, opts.CacheDir, tinyRepo, "main", c1, wanted)
	ref := filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "refs", "main")
	if err := os.WriteFile(ref, []byte(strings.Repeat("x", 5<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Fetch(context.Background(), tinyRepo, opts)
	var pe *ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "not a commit") {
		t.Fatalf("got %.300v", err)
	}
	if n := len(err.Error()); n > 400 {
		t.Fatalf("message of %d bytes", n)
	}
}

// TestHardeningServerMessages: what a server sends back (error headers and
// bodies, file names, commits, sizes) appears in errors only cut short.
func TestHardeningServerMessages(t *testing.T) {
	cleanEnv(t)
	big := strings.Repeat("m", 200_000)
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"error header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Error-Message", big)
			w.Header().Set("X-Error-Code", big)
			w.WriteHeader(http.StatusNotFound)
		}},
		{"error body", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":"` + big + `"}`))
		}},
		{"bad sha", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"sha":"` + big + `","siblings":[]}`))
		}},
		{"bad file name", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"sha":"` + c1 + `","siblings":[{"rfilename":"../` + big + `"}]}`))
		}},
		{"bad JSON number", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"sha":` + strings.Repeat("1", 200_000) + `}`))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			_, err := Fetch(context.Background(), "acme/x@"+c1, Options{CacheDir: t.TempDir(), Endpoint: srv.URL,
				HTTPClient: srv.Client(), Retries: -1})
			if err == nil {
				t.Fatal("no error")
			}
			if n := len(err.Error()); n > 1000 {
				t.Fatalf("message of %d bytes: %.300s", n, err)
			}
		})
	}
}

// TestHardeningSnapshotOutsideCache: a cached snapshot whose files or folder
// lead outside the cache through symbolic links is refused, offline and
// online.
func TestHardeningSnapshotOutsideCache(t *testing.T) {
	cleanEnv(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("local file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "head.pt"), []byte("local head"), 0o644); err != nil {
		t.Fatal(err)
	}
	snapOf := func(cache string) string {
		return filepath.Join(cache, "models--acme--kev-tiny", "snapshots", c1)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, snap string)
		file  string
	}{
		{"file link", func(t *testing.T, snap string) {
			p := filepath.Join(snap, "head.pt")
			os.Remove(p)
			if err := os.Symlink(secret, p); err != nil {
				t.Fatal(err)
			}
		}, "head.pt"},
		{"relative link climbing out", func(t *testing.T, snap string) {
			p := filepath.Join(snap, "tokenizer.json")
			os.Remove(p)
			rel, _ := filepath.Rel(snap, secret)
			if err := os.Symlink(rel, p); err != nil {
				t.Fatal(err)
			}
		}, "tokenizer.json"},
		{"folder link", func(t *testing.T, snap string) {
			if err := os.Symlink(outside, filepath.Join(snap, "extra")); err != nil {
				t.Fatal(err)
			}
		}, "extra"},
		{"snapshot link", func(t *testing.T, snap string) {
			os.RemoveAll(snap)
			if err := os.Symlink(outside, snap); err != nil {
				t.Fatal(err)
			}
		}, "."},
	}
	for _, tc := range tests {
		for _, offline := range []bool{true, false} {
			t.Run(tc.name, func(t *testing.T) {
				h := newTinyHub(t)
				opts := testOptions(t, h)
				opts.Offline = offline
				opts.Required = []string{"head.pt"}
				writePythonCache(t, h, opts.CacheDir, tinyRepo, "main", c1, wanted)
				tc.plant(t, snapOf(opts.CacheDir))
				before, _ := os.ReadDir(outside)
				snap, err := Fetch(context.Background(), tinyRepo, opts)
				var oe *OutsideCacheError
				if !errors.As(err, &oe) || oe.File != tc.file {
					t.Fatalf("offline %v: got %+v, %v; want an *OutsideCacheError on %s", offline, snap, err, tc.file)
				}
				if after, _ := os.ReadDir(outside); len(after) != len(before) {
					t.Fatalf("offline %v: %d entries written outside the cache", offline, len(after)-len(before))
				}
			})
		}
	}
	// Links inside the cache, as huggingface_hub makes them, are fine; so is
	// a cache folder that is itself a link.
	h := newTinyHub(t)
	opts := testOptions(t, h)
	real := opts.CacheDir
	opts.CacheDir = filepath.Join(t.TempDir(), "cache-link")
	if err := os.Symlink(real, opts.CacheDir); err != nil {
		t.Fatal(err)
	}
	opts.Offline = true
	writePythonCache(t, h, opts.CacheDir, tinyRepo, "main", c1, wanted)
	if _, err := Fetch(context.Background(), tinyRepo, opts); err != nil {
		t.Fatal(err)
	}
}

// TestHardeningHubOnly: with HubOnly a name is a Hub name even where a local
// directory of that name exists.
func TestHardeningHubOnly(t *testing.T) {
	cleanEnv(t)
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join("acme", "kev-tiny"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	snap, err := Fetch(context.Background(), "acme/kev-tiny", Options{CacheDir: cache, Offline: true})
	if err != nil || !snap.Local {
		t.Fatalf("without HubOnly: %+v, %v", snap, err)
	}
	snap, err = Fetch(context.Background(), "acme/kev-tiny", Options{CacheDir: cache, Offline: true, HubOnly: true})
	var nc *NotCachedError
	if !errors.As(err, &nc) {
		t.Fatalf("with HubOnly: %+v, %v; want a *NotCachedError", snap, err)
	}
	// Folders of the repository that lead outside the cache are refused
	// before a download writes into them.
	h := newTinyHub(t)
	opts := testOptions(t, h)
	opts.HubOnly = true // ./acme/kev-tiny exists
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(opts.CacheDir, "models--acme--kev-tiny")); err != nil {
		t.Fatal(err)
	}
	var oe *OutsideCacheError
	if _, err := Fetch(context.Background(), tinyRepo, opts); !errors.As(err, &oe) {
		t.Fatalf("repository folder outside the cache: %v", err)
	}
	if after, _ := os.ReadDir(outside); len(after) != 0 {
		t.Fatalf("%d entries written outside the cache", len(after))
	}
	// An absolute path is not a Hub name at all.
	abs, _ := filepath.Abs("acme")
	var ne *NameError
	if _, err := Fetch(context.Background(), abs, Options{CacheDir: cache, Offline: true, HubOnly: true}); !errors.As(err, &ne) {
		t.Fatalf("absolute path with HubOnly: %v", err)
	}
}
