package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/kevgo/kev/internal/quote"
)

// repoCache is one repository's folder in the cache.
type repoCache struct {
	ref  Ref
	dir  string // <cache>/models--org--name
	lock string // <cache>/.locks/models--org--name
}

func newRepoCache(cacheDir string, ref Ref) repoCache {
	return repoCache{
		ref:  ref,
		dir:  filepath.Join(cacheDir, ref.CacheFolder()),
		lock: filepath.Join(cacheDir, ".locks", ref.CacheFolder()),
	}
}

func (c repoCache) refPath(rev string) string {
	return filepath.Join(c.dir, "refs", filepath.FromSlash(rev))
}

func (c repoCache) snapshotDir(commit string) string {
	return filepath.Join(c.dir, "snapshots", commit)
}

func (c repoCache) blobPath(etag string) string { return filepath.Join(c.dir, "blobs", etag) }

func (c repoCache) lockPath(etag string) string { return filepath.Join(c.lock, etag+".lock") }

func (c repoCache) pointerPath(commit, file string) string {
	return filepath.Join(c.snapshotDir(commit), filepath.FromSlash(file))
}

// commitOf maps the revision to a commit through refs/, as huggingface_hub
// does offline. It returns "" when the cache has no such ref.
func (c repoCache) commitOf(rev string) (string, error) {
	if IsCommit(rev) {
		return rev, nil
	}
	b, err := readHead(c.refPath(rev), maxRefBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(b))
	if !IsCommit(commit) {
		return "", &ProtocolError{URL: c.refPath(rev), Reason: fmt.Sprintf("cached ref holds %s, not a commit", quote.String(commit))}
	}
	return commit, nil
}

// maxRefBytes is how much of a refs/ file is read: a commit and some space.
const maxRefBytes = 1024

// readHead reads at most max bytes of a file; a longer file gives its first
// max bytes and one more, enough to tell that it is too long.
func readHead(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max+1))
}

// writeRef records that rev points at commit, unless it already does or rev
// is the commit itself. The file is replaced atomically.
func (c repoCache) writeRef(rev, commit string) error {
	if rev == commit {
		return nil
	}
	p := c.refPath(rev)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := tempName(p)
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// lookup returns the cached snapshot of the revision when it is complete,
// else a *NotCachedError naming what is missing.
func (c repoCache) lookup(cfg config) (*Snapshot, error) {
	miss := func(commit string, missing ...string) error {
		return &NotCachedError{Repo: c.ref.Repo, Revision: c.ref.Revision, Commit: commit, CacheDir: c.dir,
			Missing: missing, Offline: cfg.Offline}
	}
	commit, err := c.commitOf(c.ref.Revision)
	if err != nil {
		return nil, err
	}
	if commit == "" {
		return nil, miss("", "refs/"+c.ref.Revision+" (the revision was never resolved online)")
	}
	dir := c.snapshotDir(commit)
	files, err := snapshotFiles(dir, cfg.CacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, miss(commit, "snapshots/"+commit)
	}
	if err != nil {
		return nil, err
	}
	missing, err := checkComplete(dir, files, cfg)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, miss(commit, missing...)
	}
	return &Snapshot{Dir: dir, Repo: c.ref.Repo, Revision: c.ref.Revision, Commit: commit, Files: files}, nil
}

// snapshotFiles lists the files of a snapshot folder (slash-separated,
// sorted), skipping hidden temporaries. A dangling link is listed with a
// trailing " (dangling)" marker so that callers can report it. A file or
// folder that resolves outside cacheDir (through a symbolic link) is refused
// with an *OutsideCacheError: the snapshot would make a Hub name read local
// files.
func snapshotFiles(dir, cacheDir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	inside := func(p, rel string) error { return checkInside(cacheDir, dir, p, rel) }
	if err := inside(dir, "."); err != nil {
		return nil, err
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && strings.HasSuffix(d.Name(), ".tmp") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if err := inside(p, rel); err != nil {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			rel += danglingMark
		}
		files = append(files, rel)
		return nil
	})
	sort.Strings(files)
	return files, err
}

const danglingMark = " (dangling link)"

// checkInside returns an *OutsideCacheError when p (rel in snapshot) exists
// and resolves outside cacheDir; a path that does not resolve is let be.
func checkInside(cacheDir, snapshot, p, rel string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil // missing or dangling: reported as missing elsewhere
	}
	root, err := filepath.EvalSymlinks(cacheDir)
	if err != nil {
		return err
	}
	if r, err := filepath.Rel(root, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
		return &OutsideCacheError{Snapshot: snapshot, File: rel, Target: real, CacheDir: cacheDir}
	}
	return nil
}

// checkFolders refuses a repository folder whose parts that files are
// written into (the folder, blobs/, snapshots/, the snapshot, the locks) lead
// outside the cache, before anything is written there.
func (c repoCache) checkFolders(cacheDir, commit string) error {
	snap := c.snapshotDir(commit)
	for _, p := range []string{c.dir, filepath.Join(c.dir, "blobs"), filepath.Join(c.dir, "snapshots"), snap, c.lock} {
		rel, err := filepath.Rel(snap, p)
		if err != nil {
			rel = p
		}
		if err := checkInside(cacheDir, snap, p, filepath.ToSlash(rel)); err != nil {
			return err
		}
	}
	return nil
}

// checkComplete lists what a snapshot lacks: dangling links, required files,
// files matching the allow-patterns at all, and the shards named by any
// safetensors index in it.
func checkComplete(dir string, files []string, cfg config) ([]string, error) {
	have := make(map[string]bool, len(files))
	var missing []string
	matched := false
	for _, f := range files {
		if strings.HasSuffix(f, danglingMark) {
			missing = append(missing, f)
			continue
		}
		have[f] = true
		if MatchAny(cfg.AllowPatterns, f) {
			matched = true
		}
	}
	for _, r := range cfg.Required {
		if !have[r] {
			missing = append(missing, r)
		}
	}
	if !matched && len(cfg.Required) == 0 {
		missing = append(missing, "any file matching "+strings.Join(cfg.AllowPatterns, " "))
	}
	for _, f := range files {
		if !have[f] || !strings.HasSuffix(f, ".safetensors.index.json") || !MatchAny(cfg.AllowPatterns, f) {
			continue
		}
		shards, err := indexShards(filepath.Join(dir, filepath.FromSlash(f)), f)
		if err != nil {
			return nil, err
		}
		for _, s := range shards {
			if s = path.Join(path.Dir(f), s); !have[s] {
				missing = append(missing, s)
			}
		}
	}
	return missing, nil
}

// indexShards reads the distinct shard names of a safetensors index.
func indexShards(p, name string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 256<<20)).Decode(&idx); err != nil {
		return nil, fmt.Errorf("hub: %s: %s", p, quote.Error(err))
	}
	seen := map[string]bool{}
	var shards []string
	for _, s := range idx.WeightMap {
		if seen[s] {
			continue
		}
		if err := checkFileName(s, name); err != nil {
			return nil, err
		}
		seen[s] = true
		shards = append(shards, s)
	}
	sort.Strings(shards)
	return shards, nil
}

// linkPointer makes snapshots/<commit>/<file> a relative symlink to the blob,
// replacing whatever was there atomically. Where symlinks are not available
// the blob is copied instead, as huggingface_hub does.
func linkPointer(blob, pointer string) error {
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(pointer), blob)
	if err != nil {
		rel = blob
	}
	tmp := tempName(pointer)
	if err := os.Symlink(rel, tmp); err != nil {
		if err := copyFile(blob, tmp); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, pointer); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var tempSeq atomic.Uint64

// tempName returns a hidden sibling name for p, unique in this process.
func tempName(p string) string {
	return filepath.Join(filepath.Dir(p),
		fmt.Sprintf(".%s.%d.%d.tmp", filepath.Base(p), os.Getpid(), tempSeq.Add(1)))
}
