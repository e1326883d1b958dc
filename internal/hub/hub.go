package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Snapshot describes a resolved model directory.
type Snapshot struct {
	// Dir holds the files: a cache snapshot folder
	// (<cache>/models--org--name/snapshots/<commit>) or a local directory.
	Dir string
	// Local is true when the name was a local directory; the fields below
	// are then empty.
	Local bool

	Repo     string
	Revision string // as asked for: a branch, a tag or a commit
	Commit   string // the 40-hex commit the revision resolved to

	// Files lists the snapshot's files, slash-separated and sorted.
	Files []string
	// Fetched lists the files whose content this call downloaded.
	Fetched []string
	// LastModified is the Hub's last-modified time of the revision when the
	// Hub was asked; zero when the cache answered alone.
	LastModified time.Time
}

// Resolve returns the directory holding the model called name: a local
// directory as is, or a Hub repository "org/name[@revision]" from the cache,
// downloading what the cache lacks. See Fetch.
func Resolve(ctx context.Context, name string, opts Options) (string, error) {
	s, err := Fetch(ctx, name, opts)
	if err != nil {
		return "", err
	}
	return s.Dir, nil
}

// Fetch resolves name like Resolve and describes the result.
//
// A name that is an existing directory is returned as is, with no network
// access (unless Options.HubOnly is set). Otherwise it must be "org/name" or "org/name@revision" (see
// ParseName). A complete cached snapshot of the revision is used without
// asking the Hub (unless Options.Update is set and the revision is not a
// commit). Otherwise the Hub names the revision's commit and files, and the
// files matching Options.AllowPatterns (plus Options.Required) that the
// snapshot lacks are fetched into the cache.
func Fetch(ctx context.Context, name string, opts Options) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name != "" && !opts.HubOnly {
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			abs, err := filepath.Abs(name)
			if err != nil {
				return nil, err
			}
			return &Snapshot{Dir: abs, Local: true}, nil
		}
	}
	ref, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	cfg, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := newRepoCache(cfg.CacheDir, ref)
	cached, cacheErr := rc.lookup(cfg)
	if cacheErr == nil && (cfg.Offline || !cfg.Update || IsCommit(ref.Revision)) {
		return cached, nil
	}
	if cfg.Offline {
		return nil, cacheErr
	}
	snap, err := fetchOnline(ctx, cfg, rc)
	if err != nil {
		if cached != nil && ctx.Err() == nil && isTransient(err) {
			return cached, nil
		}
		return nil, err
	}
	return snap, nil
}

// fetchOnline asks the Hub for the revision and fills the snapshot.
func fetchOnline(ctx context.Context, cfg config, rc repoCache) (*Snapshot, error) {
	ref := rc.ref
	c := newClient(cfg)
	mi, err := c.info(ctx, ref)
	if err != nil {
		return nil, err
	}
	commit := mi.SHA
	if err := rc.checkFolders(cfg.CacheDir, commit); err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	var files []string
	for _, s := range mi.Siblings {
		if err := checkFileName(s.RFilename, "file list of "+ref.String()); err != nil {
			return nil, err
		}
		listed[s.RFilename] = true
	}
	for f := range listed {
		if MatchAny(cfg.AllowPatterns, f) {
			files = append(files, f)
		}
	}
	for _, r := range cfg.Required {
		if !listed[r] {
			return nil, fmt.Errorf("hub: %s (commit %s) has no required file %s: %w", ref, commit, r, ErrEntryNotFound)
		}
		if !MatchAny(cfg.AllowPatterns, r) {
			files = append(files, r)
		}
	}
	sort.Strings(files)

	var todo []string
	for _, f := range files {
		if _, err := os.Stat(rc.pointerPath(commit, f)); err != nil {
			todo = append(todo, f)
		}
	}
	p := newProgress(cfg.Progress, "Fetching "+ref.String(), len(todo))
	var mu sync.Mutex
	var fetched []string
	err = parallel(ctx, cfg.Parallel, todo, func(ctx context.Context, file string) error {
		m, err := c.head(ctx, ref, commit, file)
		if err != nil {
			return err
		}
		p.addTotal(m.size)
		blob := rc.blobPath(m.etag)
		got, err := ensureBlob(ctx, c, rc, m, blob, p)
		if err != nil {
			return err
		}
		if got {
			mu.Lock()
			fetched = append(fetched, file)
			mu.Unlock()
		}
		if err := linkPointer(blob, rc.pointerPath(commit, file)); err != nil {
			return err
		}
		p.fileDone()
		return nil
	})
	p.close()
	if err != nil {
		return nil, err
	}
	if err := rc.writeRef(ref.Revision, commit); err != nil {
		return nil, err
	}
	dir := rc.snapshotDir(commit)
	all, err := snapshotFiles(dir, cfg.CacheDir)
	if errors.Is(err, fs.ErrNotExist) { // a revision with no matching files
		all, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	missing, err := checkComplete(dir, all, cfg)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("hub: %s (commit %s) lacks %s: %w", ref, commit, strings.Join(missing, ", "), ErrEntryNotFound)
	}
	sort.Strings(fetched)
	lm, _ := time.Parse(time.RFC3339, mi.LastModified)
	return &Snapshot{Dir: dir, Repo: ref.Repo, Revision: ref.Revision, Commit: commit, Files: all, Fetched: fetched,
		LastModified: lm}, nil
}

// ensureBlob makes sure blobs/<etag> exists, downloading it under the blob's
// lock when no one else has. It reports whether it downloaded.
func ensureBlob(ctx context.Context, c *client, rc repoCache, m *fileMeta, blob string, p *progress) (bool, error) {
	present := func() bool {
		fi, err := os.Stat(blob)
		return err == nil && fi.Mode().IsRegular()
	}
	if present() {
		(&fileProgress{p: p}).setHave(max(m.size, 0))
		return false, nil
	}
	release, err := acquire(ctx, rc.lockPath(m.etag))
	if err != nil {
		return false, err
	}
	defer release()
	if present() { // fetched while we waited for the lock
		(&fileProgress{p: p}).setHave(max(m.size, 0))
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return false, err
	}
	if err := c.download(ctx, rc.ref, m, blob, p); err != nil {
		return false, err
	}
	return true, nil
}

// parallel runs fn on each item, at most n at once, and returns the first
// error; the others are cancelled through ctx. All goroutines have ended when
// it returns.
func parallel(ctx context.Context, n int, items []string, fn func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() {
			first = err
			cancel()
		})
	}
loop:
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, it); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
