package kev

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
)

// copyDir copies dir's files into a new directory to.
func copyDir(t *testing.T, dir, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
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
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rewriteHeadBase writes a copy of the checkpoint in dir to a new directory with head.pt's base replaced by a
// string of the same length (the pickle's length prefixes stay right).
func rewriteHeadBase(t *testing.T, dir, oldBase, newBase string) string {
	t.Helper()
	if len(oldBase) != len(newBase) {
		t.Fatalf("%q and %q differ in length", oldBase, newBase)
	}
	out := filepath.Join(t.TempDir(), "kev")
	copyDir(t, dir, out)
	zr, err := zip.OpenReader(filepath.Join(dir, checkpoint.HeadFile))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	replaced := 0
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.Name, "data.pkl") {
			replaced = bytes.Count(data, []byte(oldBase))
			data = bytes.ReplaceAll(data, []byte(oldBase), []byte(newBase))
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if replaced != 1 {
		t.Fatalf("head.pt names its base %d times", replaced)
	}
	if err := os.WriteFile(filepath.Join(out, checkpoint.HeadFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHardeningHubCheckpointBase (finding 9): a checkpoint resolved from the hub may not reach into the local file
// system through the base its head.pt names. A base that is a path is refused (it used to load, exit 0), and a hub
// name is fetched from the hub even where a local directory of that name exists.
func TestHardeningHubCheckpointBase(t *testing.T) {
	s := goldenSets(t)[0]
	head, err := checkpoint.ReadHead(filepath.Join(s.kev, checkpoint.HeadFile))
	if err != nil {
		t.Fatal(err)
	}
	kevDir, _ := filepath.Abs(s.kev)
	baseDir, _ := filepath.Abs(s.base)
	work := t.TempDir()
	t.Chdir(work)
	cache := filepath.Join(work, "cache")
	t.Setenv("HF_HUB_CACHE", cache)
	const commit = "0123456789abcdef0123456789abcdef01234567"

	// A path-shaped base: "../" and a directory that exists beside the working directory.
	pathBase := "../" + strings.Repeat("b", len(head.Base)-3)
	evil := rewriteHeadBase(t, kevDir, head.Base, pathBase)
	copyDir(t, baseDir, filepath.Join(work, "sub", pathBase+"@"+head.BaseRevision)) // work/bbb…@rev
	if err := os.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Join(work, "sub"))
	if _, err := os.Stat(pathBase + "@" + head.BaseRevision); err != nil {
		t.Fatal(err)
	}
	cacheRepo(t, cache, "kevgo-tests/kev-path-base", "main", commit, evil)
	_, err = Load(context.Background(), "kevgo-tests/kev-path-base", Options{Offline: true})
	var ce *checkpoint.ConfigError
	var le *LoadError
	if !errors.As(err, &ce) || ce.Field != "base" || !errors.As(err, &le) {
		t.Errorf("hub checkpoint with a path as its base: %v", err)
	}
	// The same checkpoint from a local directory may name a local base.
	p, err := Load(context.Background(), evil, Options{Offline: true})
	if err != nil {
		t.Fatalf("local checkpoint with a local base: %v", err)
	}
	p.Close()

	// A hub name that is also a local directory (relative to the working directory), not in the hub cache.
	copyDir(t, baseDir, head.Base+"@"+head.BaseRevision)
	cacheRepo(t, cache, "kevgo-tests/kev-shadowed", "main", commit, kevDir)
	if _, err := Load(context.Background(), "kevgo-tests/kev-shadowed", Options{Offline: true}); err == nil {
		t.Error("a hub checkpoint's base was loaded from a local directory of its name")
	}
	// Cached on the hub, it loads.
	cacheRepo(t, cache, head.Base, "", head.BaseRevision, baseDir)
	p, err = Load(context.Background(), "kevgo-tests/kev-shadowed", Options{Offline: true})
	if err != nil {
		t.Fatalf("base from the hub cache: %v", err)
	}
	p.Close()
}
