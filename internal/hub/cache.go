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
	b, err := os.ReadFile(c.refPath(rev))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(b))
	if !IsCommit(commit) {
		return "", &ProtocolError{URL: c.refPath(rev), Reason: fmt.Sprintf("cached ref holds %q, not a commit", commit)}
	}
	return commit, nil
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
	files, err := snapshotFiles(dir)
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
// trailing " (dangling)" marker so that callers can report it.
func snapshotFiles(dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
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
		return nil, fmt.Errorf("hub: %s: %w", p, err)
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
