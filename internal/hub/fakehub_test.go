package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeFile is one file of a fake repository commit.
type fakeFile struct {
	name string
	data []byte
	lfs  bool
	weak bool // send the LFS etag as W/"..."
}

// etag is what the Hub sends: the SHA-256 of an LFS file, the git blob id of
// any other.
func (f fakeFile) etag() string {
	if f.lfs {
		s := sha256.Sum256(f.data)
		return hex.EncodeToString(s[:])
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(f.data))
	h.Write(f.data)
	return hex.EncodeToString(h.Sum(nil))
}

type fakeRepo struct {
	private bool
	refs    map[string]string // branch or tag -> commit
	commits map[string][]fakeFile
	// siblings, when set, replaces the file list in model info (to send
	// unsafe names).
	siblings []string
	sha      string // when set, replaces the sha in model info
}

// fakeHub serves the parts of the Hub API that Fetch uses, with the real
// shapes: model info JSON, resolve URLs answering HEAD and GET with
// X-Repo-Commit and etags, LFS files redirected to a CDN-like path with
// X-Linked-Etag and X-Linked-Size, Range requests, and errors with
// X-Error-Code.
type fakeHub struct {
	t     *testing.T
	srv   *httptest.Server
	token string

	mu    sync.Mutex
	repos map[string]*fakeRepo
	log   []string          // "METHOD path [range]"
	cut   map[string]int    // etag -> cut the next CDN body after this many bytes
	short map[string]int    // etag -> end the next CDN body cleanly, unsized, after this many bytes
	busy  map[string]int    // etag -> answer this many CDN requests with 503 first
	alias map[string]string // old repo id -> new one, answered with a relative redirect
	noRng bool              // ignore Range headers, as some servers do
	bad   map[string]bool   // etag -> serve corrupted bytes
	auth  map[string]string // path -> Authorization header seen
	badEt map[string]string // file -> etag header to send instead
	total atomic.Int64
	delay time.Duration // per CDN response
}

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{t: t, repos: map[string]*fakeRepo{}, cut: map[string]int{}, short: map[string]int{}, busy: map[string]int{}, alias: map[string]string{}, bad: map[string]bool{},
		auth: map[string]string{}, badEt: map[string]string{}, token: "hf_good"}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// client returns an HTTP client with its own transport, closed with the test.
func (h *fakeHub) client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (h *fakeHub) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...)
}

func (h *fakeHub) count(prefix string) int {
	n := 0
	for _, r := range h.requests() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (h *fakeHub) reset() {
	h.mu.Lock()
	h.log = nil
	h.mu.Unlock()
	h.total.Store(0)
}

func (h *fakeHub) addRepo(id string, r *fakeRepo) {
	h.mu.Lock()
	h.repos[id] = r
	h.mu.Unlock()
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.total.Add(1)
	path := r.URL.EscapedPath()
	h.mu.Lock()
	entry := r.Method + " " + path
	if rg := r.Header.Get("Range"); rg != "" {
		entry += " " + rg
	}
	h.log = append(h.log, entry)
	h.auth[path] = r.Header.Get("Authorization")
	h.mu.Unlock()

	switch {
	case strings.HasPrefix(path, "/api/models/"):
		h.serveInfo(w, r, strings.TrimPrefix(path, "/api/models/"))
	case strings.HasPrefix(path, "/cdn/"):
		h.serveCDN(w, r, strings.TrimPrefix(path, "/cdn/"))
	case strings.Contains(path, "/resolve/"):
		h.serveResolve(w, r, path)
	default:
		http.NotFound(w, r)
	}
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// repoFor finds the repository and checks the token, answering the error
// itself when it returns nil.
func (h *fakeHub) repoFor(w http.ResponseWriter, r *http.Request, id string) *fakeRepo {
	h.mu.Lock()
	repo := h.repos[id]
	h.mu.Unlock()
	if repo == nil {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil
	}
	if repo.private {
		switch r.Header.Get("Authorization") {
		case "":
			hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
			return nil
		case "Bearer " + h.token:
		default:
			hubError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
			return nil
		}
	}
	return repo
}

func (repo *fakeRepo) commitOf(rev string) string {
	if c, ok := repo.refs[rev]; ok {
		return c
	}
	if _, ok := repo.commits[rev]; ok {
		return rev
	}
	return ""
}

func (h *fakeHub) serveInfo(w http.ResponseWriter, r *http.Request, rest string) {
	id, rev, ok := strings.Cut(rest, "/revision/")
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	rev, err := url.PathUnescape(rev)
	if err != nil {
		http.Error(w, "bad revision", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	if to, ok := h.alias[id]; ok {
		id = to
	}
	h.mu.Unlock()
	repo := h.repoFor(w, r, id)
	if repo == nil {
		return
	}
	commit := repo.commitOf(rev)
	if commit == "" {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	info := struct {
		ID           string    `json:"id"`
		ModelID      string    `json:"modelId"`
		SHA          string    `json:"sha"`
		LastModified string    `json:"lastModified"`
		Private      bool      `json:"private"`
		Siblings     []sibling `json:"siblings"`
	}{ID: id, ModelID: id, SHA: commit, LastModified: "2026-10-01T12:34:56.000Z", Private: repo.private}
	if repo.sha != "" {
		info.SHA = repo.sha
	}
	for _, f := range repo.commits[commit] {
		info.Siblings = append(info.Siblings, sibling{f.name})
	}
	if repo.siblings != nil {
		info.Siblings = nil
		for _, s := range repo.siblings {
			info.Siblings = append(info.Siblings, sibling{s})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(info)
}

func (h *fakeHub) serveResolve(w http.ResponseWriter, r *http.Request, path string) {
	id, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/resolve/")
	h.mu.Lock()
	to, renamed := h.alias[id]
	h.mu.Unlock()
	if renamed {
		w.Header().Set("Location", "/"+to+"/resolve/"+rest)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	rev, file, _ := strings.Cut(rest, "/")
	rev, _ = url.PathUnescape(rev)
	file, _ = url.PathUnescape(file)
	repo := h.repoFor(w, r, id)
	if repo == nil {
		return
	}
	commit := repo.commitOf(rev)
	if commit == "" {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	var f *fakeFile
	for i := range repo.commits[commit] {
		if repo.commits[commit][i].name == file {
			f = &repo.commits[commit][i]
		}
	}
	if f == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	h.mu.Lock()
	override, hasOverride := h.badEt[file]
	h.mu.Unlock()
	if f.lfs {
		et := `"` + f.etag() + `"`
		if f.weak {
			et = "W/" + et
		}
		if hasOverride {
			et = override
		}
		w.Header().Set("X-Linked-Etag", et)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		w.Header().Set("ETag", `"`+f.etag()[:40]+`-redirect"`)
		w.Header().Set("Location", h.srv.URL+"/cdn/"+f.etag())
		w.WriteHeader(http.StatusFound)
		return
	}
	et := `"` + f.etag() + `"`
	if hasOverride {
		et = override
	}
	w.Header().Set("ETag", et)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(f.data)
	}
}

// serveCDN serves LFS content by SHA-256 with Range support.
func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, sha string) {
	var data []byte
	h.mu.Lock()
	for _, repo := range h.repos {
		for _, files := range repo.commits {
			for _, f := range files {
				if f.lfs && f.etag() == sha {
					data = f.data
				}
			}
		}
	}
	cut, hasCut := h.cut[sha]
	delete(h.cut, sha)
	short, hasShort := h.short[sha]
	delete(h.short, sha)
	busy := h.busy[sha] > 0
	if busy {
		h.busy[sha]--
	}
	noRange := h.noRng
	corrupt := h.bad[sha]
	delay := h.delay
	h.mu.Unlock()
	if data == nil {
		http.NotFound(w, r)
		return
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if busy {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0x5a
	}
	start := 0
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" && !noRange {
		a, ok := strings.CutPrefix(rg, "bytes=")
		a, _, ok2 := strings.Cut(a, "-")
		n, err := strconv.Atoi(a)
		if !ok || !ok2 || err != nil || n >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(data)-1, len(data)))
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("ETag", `"`+sha+`"`)
	body := data[start:]
	if hasShort && short < len(body) {
		w.WriteHeader(status)
		w.(http.Flusher).Flush() // chunked: no Content-Length
		w.Write(body[:short])
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
	w.WriteHeader(status)
	if hasCut && cut < len(body) {
		w.Write(body[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	w.Write(body)
}

// lattice returns n bytes of deterministic, non-trivial content.
func lattice(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// commitID returns a deterministic 40-hex commit for a label.
func commitID(label string) string {
	s := sha1.Sum([]byte(label))
	return hex.EncodeToString(s[:])
}
