package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kevgo/kev/internal/quote"
)

// userAgent is sent with every request.
const userAgent = "kev-go/hub"

// maxInfoBytes bounds the model info answer.
const maxInfoBytes = 32 << 20

// client talks to one Hub endpoint.
type client struct {
	cfg      config
	http     *http.Client
	noFollow *http.Client // the same client, but returning redirects unfollowed
}

func newClient(cfg config) *client {
	nf := *cfg.HTTPClient
	nf.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{cfg: cfg, http: cfg.HTTPClient, noFollow: &nf}
}

// modelInfo is the part of GET /api/models/{repo}/revision/{rev} used here.
type modelInfo struct {
	ID           string `json:"id"`
	SHA          string `json:"sha"`
	LastModified string `json:"lastModified"`
	Siblings     []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

func (c *client) newRequest(ctx context.Context, method, u string, auth bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	if auth && c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	return req, nil
}

// info asks the Hub for the revision's commit and file list.
func (c *client) info(ctx context.Context, ref Ref) (*modelInfo, error) {
	u := c.cfg.Endpoint + "/api/models/" + ref.Repo + "/revision/" + url.PathEscape(ref.Revision)
	req, err := c.newRequest(ctx, http.MethodGet, u, true)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, httpError(resp, ref, "")
	}
	var mi modelInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxInfoBytes)).Decode(&mi); err != nil {
		return nil, &ProtocolError{URL: u, Reason: "model info is not valid JSON: " + quote.Error(err)}
	}
	if !IsCommit(mi.SHA) {
		return nil, &ProtocolError{URL: u, Reason: fmt.Sprintf("model info has sha %s, not a 40-hex commit", quote.String(mi.SHA))}
	}
	if ref.Revision != mi.SHA && IsCommit(ref.Revision) {
		return nil, &ProtocolError{URL: u, Reason: "model info names commit " + mi.SHA + ", not the one asked for"}
	}
	return &mi, nil
}

// fileMeta is what a HEAD on a resolve URL tells about one file.
type fileMeta struct {
	file     string
	etag     string // normalized: no W/, no quotes
	size     int64  // -1 when unknown
	location string // where to GET the content
	resolve  string // the resolve URL
	lfs      bool   // etag is a SHA-256 of the content
}

// head reads a file's metadata the way huggingface_hub does: HEAD on the
// resolve URL, following only relative redirects (renamed repositories) and
// keeping an absolute one (a CDN) as the download location.
func (c *client) head(ctx context.Context, ref Ref, commit, file string) (*fileMeta, error) {
	resolve := c.cfg.Endpoint + "/" + ref.Repo + "/resolve/" + commit + "/" + escapePath(file)
	u := resolve
	for hops := 0; ; hops++ {
		req, err := c.newRequest(ctx, http.MethodHead, u, true)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := c.noFollow.Do(req)
		if err != nil {
			return nil, err
		}
		drainClose(resp.Body)
		switch {
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			loc := resp.Header.Get("Location")
			target, err := resp.Request.URL.Parse(loc)
			if loc == "" || err != nil {
				return nil, &ProtocolError{URL: u, Reason: fmt.Sprintf("redirect without a usable Location %s", quote.String(loc))}
			}
			if !isAbsoluteLocation(loc) {
				if hops >= 10 {
					return nil, &ProtocolError{URL: resolve, Reason: "more than 10 relative redirects"}
				}
				u = target.String()
				continue
			}
			return c.meta(resp, ref, commit, file, resolve, target.String())
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return c.meta(resp, ref, commit, file, resolve, u)
		default:
			return nil, httpError(resp, ref, file)
		}
	}
}

func (c *client) meta(resp *http.Response, ref Ref, commit, file, resolve, location string) (*fileMeta, error) {
	if got := resp.Header.Get("X-Repo-Commit"); got != "" && got != commit {
		return nil, &ProtocolError{URL: resolve, Reason: "X-Repo-Commit " + quote.String(got) + " is not the commit asked for"}
	}
	raw := resp.Header.Get("X-Linked-Etag")
	if raw == "" {
		raw = resp.Header.Get("ETag")
	}
	etag := normalizeEtag(raw)
	if err := checkEtag(etag, resolve); err != nil {
		return nil, err
	}
	m := &fileMeta{file: file, etag: etag, size: -1, location: location, resolve: resolve, lfs: isSHA256(etag)}
	sz := resp.Header.Get("X-Linked-Size")
	if sz == "" {
		sz = resp.Header.Get("Content-Length")
	}
	if sz != "" {
		n, err := strconv.ParseInt(sz, 10, 64)
		if err != nil || n < 0 {
			return nil, &ProtocolError{URL: resolve, Reason: fmt.Sprintf("bad file size %s", quote.String(sz))}
		}
		m.size = n
	}
	return m, nil
}

// retryable marks a transfer error after which a resumed request may work.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// download fetches the blob into path+".incomplete", resuming what is there,
// verifies it and moves it to path. The caller holds the blob's lock.
func (c *client) download(ctx context.Context, ref Ref, m *fileMeta, blob string, p *progress) error {
	inc := blob + ".incomplete"
	restarted := false
	fp := &fileProgress{p: p}
	for attempt := 0; ; attempt++ {
		err := c.transfer(ctx, ref, m, inc, fp)
		if err == nil {
			break
		}
		// One fresh start from byte 0 when the partial file did not fit, or
		// when the result failed its check (the partial file was removed):
		// bytes left by an earlier process may be what was wrong.
		var ie *IntegrityError
		if (errors.Is(err, errRestart) || errors.As(err, &ie)) && !restarted && ctx.Err() == nil {
			restarted = true
			attempt--
			continue
		}
		var r *retryable
		if !errors.As(err, &r) || attempt >= c.cfg.Retries || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ie *IntegrityError
			var he *HTTPError
			if errors.As(err, &ie) || errors.As(err, &he) {
				return err // these name the file already
			}
			return fmt.Errorf("hub: %s: fetching %s: %w", ref, m.file, err)
		}
		if err := sleep(ctx, time.Duration(attempt+1)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return os.Rename(inc, blob)
}

// errRestart asks download for one fresh transfer from byte 0.
var errRestart = errors.New("hub: partial file does not fit the remote file; starting over")

// transfer makes one GET, appending to the partial file inc, and checks the
// result once the body is complete.
func (c *client) transfer(ctx context.Context, ref Ref, m *fileMeta, inc string, p *fileProgress) (err error) {
	f, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	have, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	restart := func() error {
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		h.Reset()
		have = 0
		return nil
	}
	if m.size >= 0 && have > m.size {
		if err := restart(); err != nil {
			return err
		}
	}
	if m.size >= 0 && have == m.size && have > 0 {
		p.setHave(have)
		return c.verify(ref, m, f, inc, h, have)
	}

	// Python drops the token whenever the content is fetched from anywhere
	// but the resolve URL itself (a CDN): so do we.
	req, err := c.newRequest(ctx, http.MethodGet, m.location, m.location == m.resolve)
	if err != nil {
		return err
	}
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &retryable{err}
	}
	defer drainClose(resp.Body)
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, ok := contentRangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			if err := restart(); err != nil {
				return err
			}
			return errRestart
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 { // the server ignored Range: take the whole body
			if err := restart(); err != nil {
				return err
			}
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		if m.size < 0 || have == m.size {
			p.setHave(have)
			return c.verify(ref, m, f, inc, h, have)
		}
		if err := restart(); err != nil {
			return err
		}
		return errRestart
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return &retryable{httpError(resp, ref, m.file)}
	default:
		return httpError(resp, ref, m.file)
	}
	p.setHave(have)
	n, err := copyBody(ctx, io.MultiWriter(f, h), resp.Body, p)
	have += n
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &retryable{err}
	}
	if m.size >= 0 && have < m.size && resp.ContentLength < 0 { // a body of unknown length ended early
		return &retryable{fmt.Errorf("body ended after %d of %d bytes", have, m.size)}
	}
	return c.verify(ref, m, f, inc, h, have)
}

// verify checks the size and, for LFS files, the SHA-256 of a complete
// partial file; on a mismatch the file is removed.
func (c *client) verify(ref Ref, m *fileMeta, f *os.File, inc string, h hash.Hash, have int64) error {
	fail := func(check, want, got string) error {
		f.Close()
		os.Remove(inc)
		return &IntegrityError{Repo: ref.String(), File: m.file, Check: check, Want: want, Got: got}
	}
	if m.size >= 0 && have != m.size {
		return fail("size", strconv.FormatInt(m.size, 10)+" bytes", strconv.FormatInt(have, 10)+" bytes")
	}
	if m.lfs {
		if got := hex.EncodeToString(h.Sum(nil)); got != m.etag {
			return fail("sha256", m.etag, got)
		}
	}
	return f.Sync()
}

// copyBody copies src to dst in chunks, counting progress and stopping when
// ctx ends.
func copyBody(ctx context.Context, dst io.Writer, src io.Reader, p *fileProgress) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, err := dst.Write(buf[:k]); err != nil {
				return n, err
			}
			n += int64(k)
			p.add(int64(k))
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// httpError builds the typed error for a failed response.
func httpError(resp *http.Response, ref Ref, file string) *HTTPError {
	e := &HTTPError{
		Method:     resp.Request.Method,
		URL:        quote.Cut(resp.Request.URL.String(), 2*quote.MaxName),
		StatusCode: resp.StatusCode,
		Code:       quote.Cut(resp.Header.Get("X-Error-Code"), quote.Max),
		Message:    quote.Cut(resp.Header.Get("X-Error-Message"), quote.MaxMessage),
		Repo:       ref.Repo,
		Revision:   ref.Revision,
		File:       file,
	}
	if e.Message == "" && resp.Request.Method != http.MethodHead {
		var body struct {
			Error string `json:"error"`
		}
		if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body) == nil {
			e.Message = quote.Cut(body.Error, quote.MaxMessage)
		}
	}
	return e
}

// isTransient reports errors after which the cache may stand in for the Hub:
// the network failed, or the Hub answered 5xx or 429.
func isTransient(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.StatusCode >= 500 || he.StatusCode == http.StatusTooManyRequests
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

func normalizeEtag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, "\"")
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// isAbsoluteLocation reports whether a Location header names a host.
func isAbsoluteLocation(loc string) bool {
	u, err := url.Parse(loc)
	return err == nil && u.Host != ""
}

// contentRangeStart parses the first byte of "bytes a-b/n".
func contentRangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	a, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(a, 10, 64)
	return n, err == nil
}

// escapePath escapes each component of a slash-separated file name.
func escapePath(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	body.Close()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
