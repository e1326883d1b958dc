package kev

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
)

// cacheRepo lays out dir's files in a Hugging Face hub cache exactly as the Python huggingface_hub library writes
// them: content in blobs/<sha256>, snapshots/<commit>/<file> as relative symlinks to the blobs, and refs/<ref>
// holding the commit (none when ref is empty: a pinned commit needs no ref).
func cacheRepo(t *testing.T, cache, repo, ref, commit, dir string) {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snap := filepath.Join(root, "snapshots", commit)
	for _, d := range []string{filepath.Join(root, "blobs"), snap, filepath.Join(root, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		blob := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(root, "blobs", blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if ref != "" {
		if err := os.WriteFile(filepath.Join(root, "refs", ref), []byte(commit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadByName loads a golden checkpoint by its hub name from a Python-layout cache, offline: the checkpoint by
// branch, its base by the pinned base_revision in head.pt (no base given), and checks it answers exactly as the same
// files loaded from their directories.
func TestLoadByName(t *testing.T) {
	s := goldenSets(t)[0]
	head, err := checkpoint.ReadHead(filepath.Join(s.kev, "head.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if head.Base == "" || len(head.BaseRevision) != 40 {
		t.Fatalf("fixture head.pt: base %q revision %q", head.Base, head.BaseRevision)
	}
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	const run, commit = "kevgo-tests/kev-tiny", "0123456789abcdef0123456789abcdef01234567"
	cacheRepo(t, cache, run, "main", commit, s.kev)
	cacheRepo(t, cache, head.Base, "", head.BaseRevision, s.base)

	ctx := context.Background()
	byName, err := Load(ctx, run, Options{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer byName.Close()
	if in := byName.Info(); in.Run != run || in.Base != head.Base || in.BaseRevision != head.BaseRevision {
		t.Errorf("info %+v", in)
	}
	byDir, err := Load(ctx, s.kev, Options{Base: s.base})
	if err != nil {
		t.Fatal(err)
	}
	defer byDir.Close()
	for _, name := range []string{run, run + "@main", run + "@" + commit} {
		p := byName
		if name != run {
			if p, err = Load(ctx, name, Options{Offline: true}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		for _, req := range smallRequests(t, s) {
			if a, b := probs(t, p, req), probs(t, byDir, req); !equalProbs(a, b) {
				t.Errorf("%s: probabilities %v, from the directories %v", name, a, b)
			}
		}
		if p != byName {
			p.Close()
		}
	}
}
