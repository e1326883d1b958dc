package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// cleanEnv isolates a test from the machine's Hugging Face settings.
func cleanEnv(t *testing.T) {
	t.Helper()
	home := t.TempDir()
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
		"HF_ENDPOINT", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_HOME", home)
}

// noLeaks fails the test if goroutines started during it outlive it. Call it
// first, so that its cleanup runs after every other. Goroutines get 30 s to
// finish: a leak never does, and a busy machine may be slow to run them.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

const (
	tinyRepo = "acme/kev-tiny"
	baseRepo = "acme/base-tiny"
)

var (
	c1 = commitID("kev-tiny c1")
	c2 = commitID("kev-tiny c2")
	cb = commitID("base-tiny c1")
)

// tinyFiles is a small Kev checkpoint: what Kev fetches plus files it must not.
func tinyFiles(headSeed uint64) []fakeFile {
	return []fakeFile{
		{name: "adapter_config.json", data: []byte(`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}`)},
		{name: "adapter_model.safetensors", data: lattice(1, 200_000), lfs: true},
		{name: "head.pt", data: lattice(headSeed, 70_001), lfs: true, weak: true},
		{name: "tokenizer.json", data: []byte(`{"version": "1.0", "model": {"type": "BPE"}}`)},
		{name: "chat_template.jinja", data: []byte("{{ messages }}")},
		{name: "sub/notes.txt", data: []byte("nested file\n")},
		{name: "README.md", data: []byte("# kev-tiny\n")},
		{name: "train.log", data: []byte("step 1 loss 0.5\n")},
	}
}

// wanted is what Kev's patterns select from tinyFiles.
var wanted = []string{"adapter_config.json", "adapter_model.safetensors", "chat_template.jinja", "head.pt",
	"sub/notes.txt", "tokenizer.json"}

func newTinyHub(t *testing.T) *fakeHub {
	h := newFakeHub(t)
	h.addRepo(tinyRepo, &fakeRepo{
		refs:    map[string]string{"main": c1, "v1.0": c1, "dev": c2},
		commits: map[string][]fakeFile{c1: tinyFiles(2), c2: tinyFiles(3)},
	})
	h.addRepo(baseRepo, &fakeRepo{
		refs: map[string]string{"main": cb},
		commits: map[string][]fakeFile{cb: {
			{name: "config.json", data: []byte(`{"model_type": "qwen3_5"}`)},
			{name: "model.safetensors.index.json", data: []byte(`{"metadata": {}, "weight_map": {` +
				`"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}}`)},
			{name: "model-00001-of-00002.safetensors", data: lattice(11, 50_000), lfs: true},
			{name: "model-00002-of-00002.safetensors", data: lattice(12, 40_000), lfs: true},
		}},
	})
	h.addRepo("acme/private", &fakeRepo{
		private: true,
		refs:    map[string]string{"main": c1},
		commits: map[string][]fakeFile{c1: tinyFiles(2)},
	})
	return h
}

func testOptions(t *testing.T, h *fakeHub) Options {
	return Options{CacheDir: t.TempDir(), Endpoint: h.srv.URL, HTTPClient: h.client(t), Progress: io.Discard}
}

func fileData(t *testing.T, h *fakeHub, repo, commit, name string) []byte {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.repos[repo].commits[commit] {
		if f.name == name {
			return f.data
		}
	}
	t.Fatalf("no file %s in %s@%s", name, repo, commit)
	return nil
}

func fileEtag(h *fakeHub, repo, commit, name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.repos[repo].commits[commit] {
		if f.name == name {
			return f.etag()
		}
	}
	return ""
}

// checkSnapshot checks the exact layout huggingface_hub creates, and the
// content of every file.
func checkSnapshot(t *testing.T, h *fakeHub, cacheDir, repo, commit, dir string, files []string) {
	t.Helper()
	repoDir := filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	if want := filepath.Join(repoDir, "snapshots", commit); dir != want {
		t.Fatalf("dir = %s, want %s", dir, want)
	}
	for _, name := range files {
		pointer := filepath.Join(dir, filepath.FromSlash(name))
		target, err := os.Readlink(pointer)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		up := strings.Repeat("../", strings.Count(name, "/")+2)
		if want := up + "blobs/" + fileEtag(h, repo, commit, name); target != want {
			t.Errorf("%s -> %s, want %s", name, target, want)
		}
		got, err := os.ReadFile(pointer)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, fileData(t, h, repo, commit, name)) {
			t.Errorf("%s: content differs (%d bytes, want %d)", name, len(got), len(fileData(t, h, repo, commit, name)))
		}
	}
	blobs, _ := filepath.Glob(filepath.Join(repoDir, "blobs", "*"))
	for _, b := range blobs {
		if strings.HasSuffix(b, ".incomplete") {
			t.Errorf("left behind: %s", b)
		}
	}
}

func TestFetchLayoutMatchesPython(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if !slices.Equal(snap.Files, wanted) || !slices.Equal(snap.Fetched, wanted) {
		t.Errorf("Files = %v, Fetched = %v, want %v", snap.Files, snap.Fetched, wanted)
	}
	if snap.Commit != c1 || snap.Revision != "main" || snap.Repo != tinyRepo || snap.Local {
		t.Errorf("snapshot = %+v", snap)
	}
	if want := time.Date(2026, 10, 1, 12, 34, 56, 0, time.UTC); !snap.LastModified.Equal(want) {
		t.Errorf("LastModified = %v, want %v", snap.LastModified, want)
	}
	ref, err := os.ReadFile(filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "refs", "main"))
	if err != nil || string(ref) != c1 {
		t.Errorf("refs/main = %q, %v; want %q without newline", ref, err, c1)
	}
	// The exact tree huggingface_hub would leave (lock files aside).
	var tree []string
	root := filepath.Join(opts.CacheDir, "models--acme--kev-tiny")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			tree = append(tree, filepath.ToSlash(rel))
		}
		return nil
	})
	var want []string
	for _, f := range wanted {
		want = append(want, "blobs/"+fileEtag(h, tinyRepo, c1, f), "snapshots/"+c1+"/"+f)
	}
	want = append(want, "refs/main")
	slices.Sort(want)
	if !slices.Equal(tree, want) {
		t.Errorf("cache tree:\n%s\nwant:\n%s", strings.Join(tree, "\n"), strings.Join(want, "\n"))
	}
	locks, _ := filepath.Glob(filepath.Join(opts.CacheDir, ".locks", "models--acme--kev-tiny", "*.lock"))
	if len(locks) != len(wanted) {
		t.Errorf("%d lock files, want one per blob (%d)", len(locks), len(wanted))
	}
	for _, r := range h.requests() {
		if strings.Contains(r, "README.md") || strings.Contains(r, "train.log") {
			t.Errorf("requested a file outside the patterns: %s", r)
		}
	}
	// LFS content comes from the CDN path, without the token.
	if n := h.count("GET /cdn/"); n != 2 {
		t.Errorf("%d CDN downloads, want 2", n)
	}
}

func TestCacheHitMakesNoRequest(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	first, err := Resolve(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.reset()
	for _, name := range []string{tinyRepo, tinyRepo + "@main", tinyRepo + "@" + c1} {
		snap, err := Fetch(context.Background(), name, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if snap.Dir != first || len(snap.Fetched) != 0 || !snap.LastModified.IsZero() {
			t.Errorf("%s: %+v", name, snap)
		}
	}
	if n := h.total.Load(); n != 0 {
		t.Errorf("cache hit made %d requests: %v", n, h.requests())
	}
	// A tag never resolved online is not in refs/: that takes the network.
	if _, err := Resolve(context.Background(), tinyRepo+"@v1.0", opts); err != nil {
		t.Fatal(err)
	}
	if n := h.count("GET /api/models/"); n != 1 {
		t.Errorf("tag lookup made %d info requests, want 1", n)
	}
	if n := h.count("GET /cdn/"); n != 0 {
		t.Errorf("tag on a cached commit downloaded %d blobs, want 0", n)
	}
	if ref, _ := os.ReadFile(filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "refs", "v1.0")); string(ref) != c1 {
		t.Errorf("refs/v1.0 = %q", ref)
	}
}

// writePythonCache lays a snapshot out by hand, as huggingface_hub would.
func writePythonCache(t *testing.T, h *fakeHub, cacheDir, repo, rev, commit string, files []string) {
	t.Helper()
	root := filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "refs"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "blobs"), 0o755))
	if rev != commit {
		must(os.WriteFile(filepath.Join(root, "refs", rev), []byte(commit), 0o644))
	}
	for _, f := range files {
		etag := fileEtag(h, repo, commit, f)
		must(os.WriteFile(filepath.Join(root, "blobs", etag), fileData(t, h, repo, commit, f), 0o644))
		pointer := filepath.Join(root, "snapshots", commit, filepath.FromSlash(f))
		must(os.MkdirAll(filepath.Dir(pointer), 0o755))
		must(os.Symlink(strings.Repeat("../", strings.Count(f, "/")+2)+"blobs/"+etag, pointer))
	}
}

func TestReusesPythonCache(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	files := append(slices.Clone(wanted), "README.md") // Python may hold more
	writePythonCache(t, h, opts.CacheDir, tinyRepo, "main", c1, files)
	opts.Required = []string{"head.pt", "adapter_config.json"}
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, files)
	if n := h.total.Load(); n != 0 {
		t.Errorf("%d requests for a cached snapshot", n)
	}

	// A snapshot missing a file Python never fetched is completed online,
	// reusing the blobs it has.
	opts2 := testOptions(t, h)
	writePythonCache(t, h, opts2.CacheDir, tinyRepo, "main", c1, []string{"adapter_model.safetensors", "adapter_config.json"})
	opts2.Required = []string{"head.pt"}
	snap, err = Fetch(context.Background(), tinyRepo, opts2)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts2.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if want := []string{"chat_template.jinja", "head.pt", "sub/notes.txt", "tokenizer.json"}; !slices.Equal(snap.Fetched, want) {
		t.Errorf("Fetched = %v, want %v", snap.Fetched, want)
	}
}

func TestShardIndexCompleteness(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	writePythonCache(t, h, opts.CacheDir, baseRepo, "main", cb,
		[]string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"})
	opts.Offline = true
	_, err := Fetch(context.Background(), baseRepo, opts)
	var nc *NotCachedError
	if !errors.As(err, &nc) || !slices.Equal(nc.Missing, []string{"model-00002-of-00002.safetensors"}) || !nc.Offline {
		t.Fatalf("err = %v, want the missing shard named", err)
	}
	opts.Offline = false
	snap, err := Fetch(context.Background(), baseRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(snap.Fetched, []string{"model-00002-of-00002.safetensors"}) {
		t.Errorf("Fetched = %v", snap.Fetched)
	}
	if n := h.total.Load(); n != 3 { // info, HEAD, CDN GET
		t.Errorf("%d requests, want 3: %v", n, h.requests())
	}
}

func TestOffline(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	t.Setenv("HF_HUB_OFFLINE", "1")

	_, err := Fetch(context.Background(), tinyRepo, opts)
	var nc *NotCachedError
	if !errors.As(err, &nc) || !errors.Is(err, ErrNotCached) || !nc.Offline {
		t.Fatalf("empty cache: err = %v", err)
	}
	for _, want := range []string{tinyRepo + "@main", "refs/main", "offline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	_, err = Fetch(context.Background(), tinyRepo+"@"+c2, opts)
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), "snapshots/"+c2) {
		t.Errorf("commit not cached: err = %v", err)
	}

	writePythonCache(t, h, opts.CacheDir, tinyRepo, "main", c1, []string{"adapter_config.json", "adapter_model.safetensors"})
	opts.Required = []string{"adapter_config.json", "head.pt"}
	_, err = Fetch(context.Background(), tinyRepo, opts)
	if !errors.As(err, &nc) || !slices.Equal(nc.Missing, []string{"head.pt"}) || nc.Commit != c1 {
		t.Errorf("partial cache: err = %v", err)
	}

	// A dangling link is missing too.
	root := filepath.Join(opts.CacheDir, "models--acme--kev-tiny")
	os.Symlink("../../blobs/"+strings.Repeat("0", 64), filepath.Join(root, "snapshots", c1, "head.pt"))
	_, err = Fetch(context.Background(), tinyRepo, opts)
	if !errors.As(err, &nc) || !strings.Contains(err.Error(), "head.pt (dangling link)") {
		t.Errorf("dangling link: err = %v", err)
	}

	os.Remove(filepath.Join(root, "snapshots", c1, "head.pt"))
	opts.Required = []string{"adapter_config.json"}
	dir, err := Resolve(context.Background(), tinyRepo, opts)
	if err != nil || dir != filepath.Join(root, "snapshots", c1) {
		t.Errorf("complete cache offline: %q, %v", dir, err)
	}
	if n := h.total.Load(); n != 0 {
		t.Errorf("offline mode made %d requests", n)
	}
}

func TestLocalDirectoryNeedsNoNetwork(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1") // nothing listens there
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "head.pt"), []byte("pt"), 0o644)
	snap, err := Fetch(context.Background(), dir, Options{})
	if err != nil || snap.Dir != dir || !snap.Local {
		t.Fatalf("%+v, %v", snap, err)
	}
	// A relative directory comes back absolute.
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(wd, dir)
	got, err := Resolve(context.Background(), rel, Options{})
	if err != nil || got != dir {
		t.Errorf("Resolve(%q) = %q, %v", rel, got, err)
	}
}

func TestResumeAfterCutOff(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	headEtag := fileEtag(h, tinyRepo, c1, "head.pt")
	blob := filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "blobs", headEtag)

	// No retries: the first call fails and leaves the partial file.
	h.cut[headEtag] = 30_000
	opts.Retries = -1
	opts.Parallel = 1
	_, err := Fetch(context.Background(), tinyRepo, opts)
	if err == nil || !strings.Contains(err.Error(), "head.pt") {
		t.Fatalf("cut transfer: err = %v", err)
	}
	fi, err := os.Stat(blob + ".incomplete")
	if err != nil || fi.Size() != 30_000 {
		t.Fatalf("partial file: %v, %v", fi, err)
	}
	if _, err := os.Stat(blob); err == nil {
		t.Fatal("a cut transfer left a blob")
	}
	// The second call resumes where the first stopped.
	h.reset()
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if n := h.count("GET /cdn/" + headEtag + " bytes=30000-"); n != 1 {
		t.Errorf("want one resumed request, got %v", h.requests())
	}

	// With retries, one call resumes by itself.
	opts2 := testOptions(t, h)
	adapterEtag := fileEtag(h, tinyRepo, c1, "adapter_model.safetensors")
	h.cut[adapterEtag] = 12_345
	h.reset()
	snap, err = Fetch(context.Background(), tinyRepo, opts2)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts2.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if n := h.count("GET /cdn/" + adapterEtag + " bytes=12345-"); n != 1 {
		t.Errorf("want one resumed request, got %v", h.requests())
	}
}

func TestResumeAfterShortUnsizedBody(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	etag := fileEtag(h, tinyRepo, c1, "adapter_model.safetensors")
	h.short[etag] = 777
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if n := h.count("GET /cdn/" + etag + " bytes=777-"); n != 1 {
		t.Errorf("want one resumed request, got %v", h.requests())
	}
}

func TestServerQuirks(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	headEtag := fileEtag(h, tinyRepo, c1, "head.pt")

	// A server that ignores Range: the partial file is replaced by the body.
	opts := testOptions(t, h)
	blobs := filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	os.WriteFile(filepath.Join(blobs, headEtag+".incomplete"), []byte("stale bytes"), 0o644)
	h.noRng = true
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	h.noRng = false
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)

	// 503 answers are retried.
	opts = testOptions(t, h)
	h.busy[headEtag] = 2
	h.reset()
	if snap, err = Fetch(context.Background(), tinyRepo, opts); err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	if n := h.count("GET /cdn/" + headEtag); n != 3 {
		t.Errorf("%d CDN requests for head.pt, want 3", n)
	}
	// ... but not forever.
	opts = testOptions(t, h)
	h.busy[headEtag] = 100
	_, err = Fetch(context.Background(), tinyRepo, opts)
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 503 || he.File != "head.pt" {
		t.Errorf("err = %v, want the 503", err)
	}
	h.busy[headEtag] = 0

	// A renamed repository: the resolve URL redirects relatively, and the
	// files land under the name asked for, as in Python.
	h.alias["acme/old-name"] = tinyRepo
	opts = testOptions(t, h)
	if snap, err = Fetch(context.Background(), "acme/old-name", opts); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(opts.CacheDir, "models--acme--old-name", "snapshots", c1); snap.Dir != want {
		t.Errorf("dir = %s, want %s", snap.Dir, want)
	}
	if got, _ := os.ReadFile(filepath.Join(snap.Dir, "head.pt")); !bytes.Equal(got, fileData(t, h, tinyRepo, c1, "head.pt")) {
		t.Error("head.pt differs")
	}
}

func TestLockWaitsForOtherProcess(t *testing.T) {
	noLeaks(t)
	path := filepath.Join(t.TempDir(), ".locks", "models--a--b", "x.lock")
	os.MkdirAll(filepath.Dir(path), 0o755)
	// Another process (Python's FileLock) holds the lock: a separate open
	// file description with an exclusive flock.
	other, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, err := tryLockFile(other); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := acquire(ctx, path); runtime.GOOS == "linux" && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while held: %v", err)
	}
	unlockFile(other)
	release, err := acquire(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	// Held by us now: a second goroutine waits until release.
	got := make(chan error, 1)
	go func() {
		r, err := acquire(context.Background(), path)
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second acquire did not wait: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestRangeNotSatisfiable(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	headEtag := fileEtag(h, tinyRepo, c1, "head.pt")
	head := fileData(t, h, tinyRepo, c1, "head.pt")
	for _, tc := range []struct {
		name    string
		partial []byte
		ranges  []string // Range headers sent to the CDN for head.pt
	}{
		// Longer than the file: dropped without asking.
		{"too long", append(slices.Clone(head), 1, 2, 3), []string{""}},
		// Complete already: verified without asking.
		{"complete", head, nil},
		// A prefix: resumed.
		{"prefix", head[:1000], []string{"bytes=1000-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(t, h)
			blobs := filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "blobs")
			os.MkdirAll(blobs, 0o755)
			os.WriteFile(filepath.Join(blobs, headEtag+".incomplete"), tc.partial, 0o644)
			h.reset()
			snap, err := Fetch(context.Background(), tinyRepo, opts)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
			var ranges []string
			for _, r := range h.requests() {
				if rest, ok := strings.CutPrefix(r, "GET /cdn/"+headEtag); ok {
					ranges = append(ranges, strings.TrimSpace(rest))
				}
			}
			if !slices.Equal(ranges, tc.ranges) {
				t.Errorf("ranges = %q, want %q", ranges, tc.ranges)
			}
		})
	}

	// Without a known size, a complete partial file draws a 416, and is then
	// accepted after its SHA-256 check.
	opts := testOptions(t, h)
	c := newClient(mustConfig(t, opts))
	ref := Ref{Repo: tinyRepo, Revision: c1}
	m, err := c.head(context.Background(), ref, c1, "head.pt")
	if err != nil {
		t.Fatal(err)
	}
	m.size = -1
	blob := filepath.Join(t.TempDir(), headEtag)
	os.WriteFile(blob+".incomplete", head, 0o644)
	h.reset()
	if err := c.download(context.Background(), ref, m, blob, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(blob); !bytes.Equal(got, head) {
		t.Error("blob differs")
	}
	if r := h.requests(); len(r) != 1 || !strings.HasSuffix(r[0], fmt.Sprintf("bytes=%d-", len(head))) {
		t.Errorf("requests = %v", r)
	}
	// And a partial file that does not fit (416 with a known, larger size)
	// starts over once.
	m.size = int64(len(head)) + 10
	os.WriteFile(blob+".incomplete", append(slices.Clone(head), 0), 0o644)
	h.reset()
	err = c.download(context.Background(), ref, m, filepath.Join(filepath.Dir(blob), "other"), nil)
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.Check != "size" {
		t.Errorf("err = %v, want a size mismatch after starting over", err)
	}
}

func mustConfig(t *testing.T, o Options) config {
	t.Helper()
	c, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCorruptDownloadRejected(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	headEtag := fileEtag(h, tinyRepo, c1, "head.pt")
	h.bad[headEtag] = true
	_, err := Fetch(context.Background(), tinyRepo, opts)
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.Check != "sha256" || ie.File != "head.pt" || ie.Want != headEtag || ie.Got == headEtag {
		t.Fatalf("err = %v, want a sha256 mismatch on head.pt", err)
	}
	if n := h.count("GET /cdn/" + headEtag); n != 2 {
		t.Errorf("%d downloads of the corrupt file, want 2 (one fresh retry)", n)
	}
	root := filepath.Join(opts.CacheDir, "models--acme--kev-tiny")
	for _, p := range []string{"blobs/" + headEtag, "blobs/" + headEtag + ".incomplete", "snapshots/" + c1 + "/head.pt"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s exists after a rejected download", p)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "refs", "main")); err == nil {
		t.Error("refs/main written for an incomplete snapshot")
	}
	// Once the server is fixed, the next call succeeds.
	h.mu.Lock()
	delete(h.bad, headEtag)
	h.mu.Unlock()
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
}

func TestCorruptPartialFileRepaired(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	headEtag := fileEtag(h, tinyRepo, c1, "head.pt")
	blobs := filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	bad := slices.Clone(fileData(t, h, tinyRepo, c1, "head.pt")[:5000])
	bad[100] ^= 0xff // a damaged prefix left by an earlier process
	os.WriteFile(filepath.Join(blobs, headEtag+".incomplete"), bad, 0o644)
	snap, err := Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, snap.Dir, wanted)
	var got []string
	for _, r := range h.requests() {
		if rest, ok := strings.CutPrefix(r, "GET /cdn/"+headEtag); ok {
			got = append(got, strings.TrimSpace(rest))
		}
	}
	if want := []string{"bytes=5000-", ""}; !slices.Equal(got, want) {
		t.Errorf("ranges = %q, want %q", got, want)
	}
}

func TestAuthorization(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	const repo = "acme/private"

	opts := testOptions(t, h)
	_, err := Fetch(context.Background(), repo, opts)
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 401 || !errors.Is(err, ErrRepoNotFound) || !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("no token: err = %v", err)
	}
	if !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("error %q does not say how to authenticate", err)
	}

	opts.Token = "hf_wrong"
	_, err = Fetch(context.Background(), repo, opts)
	if !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrRepoNotFound) || strings.Contains(err.Error(), "hf_wrong") {
		t.Fatalf("wrong token: err = %v", err)
	}

	// The right token from the environment, and from the token file.
	for _, viaFile := range []bool{false, true} {
		h.reset()
		opts := testOptions(t, h)
		if viaFile {
			t.Setenv("HF_TOKEN", "")
			os.WriteFile(filepath.Join(os.Getenv("HF_HOME"), "token"), []byte(h.token+"\n"), 0o600)
		} else {
			t.Setenv("HF_TOKEN", h.token)
		}
		snap, err := Fetch(context.Background(), repo, opts)
		if err != nil {
			t.Fatalf("token (file %v): %v", viaFile, err)
		}
		checkSnapshot(t, h, opts.CacheDir, repo, c1, snap.Dir, wanted)
		h.mu.Lock()
		for path, a := range h.auth {
			cdn := strings.HasPrefix(path, "/cdn/")
			if cdn && a != "" {
				t.Errorf("token sent to the CDN: %s", path)
			}
			if !cdn && a != "Bearer "+h.token {
				t.Errorf("%s: Authorization %q", path, a)
			}
		}
		h.auth = map[string]string{}
		h.mu.Unlock()
	}
}

func TestNotFound(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	for _, tc := range []struct {
		name   string
		target error
		status int
	}{
		{"acme/nope", ErrRepoNotFound, 404},
		{tinyRepo + "@no-such-branch", ErrRevisionNotFound, 404},
		{tinyRepo + "@" + commitID("unknown"), ErrRevisionNotFound, 404},
	} {
		_, err := Fetch(context.Background(), tc.name, opts)
		var he *HTTPError
		if !errors.Is(err, tc.target) || !errors.As(err, &he) || he.StatusCode != tc.status {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.target)
		}
	}
	// A file listed in model info that the resolve URL does not know.
	h.addRepo("acme/ghost", &fakeRepo{refs: map[string]string{"main": c1}, commits: map[string][]fakeFile{c1: tinyFiles(2)},
		siblings: []string{"adapter_config.json", "ghost.json"}})
	_, err := Fetch(context.Background(), "acme/ghost", opts)
	var he *HTTPError
	if !errors.Is(err, ErrEntryNotFound) || !errors.As(err, &he) || he.File != "ghost.json" {
		t.Errorf("missing file: err = %v", err)
	}
	// A required file the revision lacks.
	opts.Required = []string{"head.pt"}
	h.addRepo("acme/headless", &fakeRepo{refs: map[string]string{"main": c1},
		commits: map[string][]fakeFile{c1: tinyFiles(2)[:1]}})
	_, err = Fetch(context.Background(), "acme/headless", opts)
	if !errors.Is(err, ErrEntryNotFound) || !strings.Contains(err.Error(), "head.pt") {
		t.Errorf("missing required file: err = %v", err)
	}
}

func TestRefusals(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	for _, name := range []string{
		"", "../x", "../../etc", "/nonexistent/kev-x", `acme\kev`, `..\x`, "acme/kev@../x", "acme/kev@a/../b",
		"acme/kev@..", "acme/kev@", "acme/kev@/abs", "acme/kev@a\\b", "acme//kev", "acme/kev/extra", "a--b/c",
		"acme/ke v", "@main", "acme/.kev", "acme/kev-", "acme/kev@a//b", "acme/kev@.hidden", "acme/kev@a b",
		"acme/k\x00ev", "acme/kév",
	} {
		_, err := Fetch(context.Background(), name, Options{Offline: true, CacheDir: t.TempDir()})
		var ne *NameError
		if !errors.As(err, &ne) {
			t.Errorf("%q: err = %v, want a *NameError", name, err)
		}
	}

	h := newTinyHub(t)
	for _, tc := range []struct {
		siblings []string
		sha      string
		field    string
	}{
		{siblings: []string{"adapter_config.json", "../../etc/passwd.json"}, field: "file name"},
		{siblings: []string{"/etc/passwd.json"}, field: "file name"},
		{siblings: []string{`..\..\x.json`}, field: "file name"},
		{siblings: []string{"a/../../b.json"}, field: "file name"},
		{siblings: []string{"C:/x.json"}, field: "file name"},
		{siblings: []string{"a//b.json"}, field: "file name"},
		{siblings: []string{"./a.json"}, field: "file name"},
		{sha: "../../../../tmp/x"},
		{sha: strings.Repeat("A", 40)},
	} {
		h.addRepo("acme/evil", &fakeRepo{refs: map[string]string{"main": c1}, commits: map[string][]fakeFile{c1: tinyFiles(2)},
			siblings: tc.siblings, sha: tc.sha})
		opts := testOptions(t, h)
		_, err := Fetch(context.Background(), "acme/evil", opts)
		var ne *NameError
		var pe *ProtocolError
		switch {
		case tc.field != "" && (!errors.As(err, &ne) || ne.Field != tc.field || !strings.Contains(ne.Source, "acme/evil")):
			t.Errorf("siblings %q: err = %v", tc.siblings, err)
		case tc.sha != "" && !errors.As(err, &pe):
			t.Errorf("sha %q: err = %v", tc.sha, err)
		}
		if n := h.count("HEAD "); n != 0 {
			t.Errorf("siblings %q: %d files asked for after a refusal", tc.siblings, n)
		}
		if entries, _ := os.ReadDir(opts.CacheDir); len(entries) != 0 {
			t.Errorf("cache written after a refusal: %v", entries)
		}
		h.reset()
	}

	// An etag that is not a safe file name.
	for _, et := range []string{`"../../x"`, `"a/b"`, `""`, `"..hidden"`} {
		h.mu.Lock()
		h.badEt["adapter_config.json"] = et
		h.mu.Unlock()
		_, err := Fetch(context.Background(), tinyRepo, testOptions(t, h))
		var pe *ProtocolError
		if !errors.As(err, &pe) {
			t.Errorf("etag %s: err = %v", et, err)
		}
	}

	// Bad settings.
	for _, o := range []Options{
		{Endpoint: "ftp://example.org"}, {Endpoint: "not a url"}, {Required: []string{"../head.pt"}},
	} {
		o.CacheDir = t.TempDir()
		_, err := Fetch(context.Background(), tinyRepo, o)
		var ne *NameError
		if !errors.As(err, &ne) {
			t.Errorf("%+v: err = %v", o, err)
		}
	}
}

func TestConcurrentResolves(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	h.delay = 20 * time.Millisecond // keep transfers overlapping
	opts := testOptions(t, h)
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := tinyRepo
			if i%2 == 1 {
				name += "@" + c1
			}
			dirs[i], errs[i] = Resolve(context.Background(), name, opts)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("resolve %d: %v", i, errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Errorf("resolve %d: %s, want %s", i, dirs[i], dirs[0])
		}
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c1, dirs[0], wanted)
	for _, f := range []string{"adapter_model.safetensors", "head.pt"} {
		if got := h.count("GET /cdn/" + fileEtag(h, tinyRepo, c1, f)); got != 1 {
			t.Errorf("%s downloaded %d times, want once", f, got)
		}
	}
}

func TestUpdateFollowsBranch(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	if _, err := Resolve(context.Background(), tinyRepo, opts); err != nil {
		t.Fatal(err)
	}
	// main moves to c2, where only head.pt changed.
	h.mu.Lock()
	h.repos[tinyRepo].refs["main"] = c2
	h.mu.Unlock()
	h.reset()
	snap, err := Fetch(context.Background(), tinyRepo, opts) // cache first: still c1
	if err != nil || snap.Commit != c1 || h.total.Load() != 0 {
		t.Fatalf("cache-first: %+v, %v, %d requests", snap, err, h.total.Load())
	}
	opts.Update = true
	snap, err = Fetch(context.Background(), tinyRepo, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, h, opts.CacheDir, tinyRepo, c2, snap.Dir, wanted)
	if !slices.Equal(snap.Fetched, []string{"head.pt"}) {
		t.Errorf("Fetched = %v, want only the changed file", snap.Fetched)
	}
	ref, _ := os.ReadFile(filepath.Join(opts.CacheDir, "models--acme--kev-tiny", "refs", "main"))
	if string(ref) != c2 {
		t.Errorf("refs/main = %q, want %q", ref, c2)
	}
	// The Hub unreachable: Update falls back to the cache.
	opts.Endpoint = "http://127.0.0.1:1"
	snap, err = Fetch(context.Background(), tinyRepo, opts)
	if err != nil || snap.Commit != c2 {
		t.Errorf("unreachable Hub: %+v, %v", snap, err)
	}
}

func TestProgress(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	var buf syncBuffer
	opts.Progress = &buf
	if _, err := Resolve(context.Background(), tinyRepo, opts); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	last := out[strings.LastIndex(out, "\r")+1:]
	if !strings.HasPrefix(last, "Fetching acme/kev-tiny@main: 6/6 files") || !strings.Contains(last, "(100%)") ||
		!strings.HasSuffix(last, "\n") {
		t.Errorf("last progress line = %q", last)
	}
	// Nothing to fetch: no line.
	buf.Reset()
	if _, err := Resolve(context.Background(), tinyRepo, opts); err != nil || buf.String() != "" {
		t.Errorf("cache hit printed %q, %v", buf.String(), err)
	}
}

func TestCancel(t *testing.T) {
	noLeaks(t)
	cleanEnv(t)
	h := newTinyHub(t)
	h.delay = 200 * time.Millisecond
	opts := testOptions(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Fetch(ctx, tinyRepo, opts)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// TestPythonReadsOurCache asks huggingface_hub itself to read a cache this
// package wrote. It runs when KEV_HUB_PYTHON names a Python interpreter with
// huggingface_hub installed.
func TestPythonReadsOurCache(t *testing.T) {
	py := os.Getenv("KEV_HUB_PYTHON")
	if py == "" {
		t.Skip("set KEV_HUB_PYTHON to a Python with huggingface_hub to run")
	}
	cleanEnv(t)
	h := newTinyHub(t)
	opts := testOptions(t, h)
	if _, err := Resolve(context.Background(), tinyRepo, opts); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, append([]string{"testdata/python_reads_cache.py", opts.CacheDir, tinyRepo, c1}, wanted...)...)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HUB_DISABLE_TELEMETRY=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
