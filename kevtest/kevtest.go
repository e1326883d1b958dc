// Package kevtest provides what tests of code that uses package kev need, in the manner of net/http/httptest: the
// small random test checkpoint bundled in the package (a few hundred kilobytes, exact but meaningless answers,
// loaded in well under a second on a CPU), a *kev.Predictor loaded on it for the length of a test, and Fake, a
// kev.Asker that answers fixed probabilities without a model.
//
// A test of a service against real probabilities:
//
//	func TestRouter(t *testing.T) {
//		p := kevtest.NewPredictor(t, kev.Options{})
//		r := NewRouter(p) // takes a kev.Asker
//		...
//	}
package kevtest

import (
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/kevgo/kev"
)

// TB is the part of testing.TB that kevtest uses; *testing.T, *testing.B and *testing.F satisfy it. (The package
// does not import testing, so a program may use WriteModel without linking it.)
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatal(args ...any)
}

//go:embed model
var model embed.FS

// The bundled checkpoint's directories inside Files.
const (
	CheckpointDir = "kev"  // the Kev checkpoint: head.pt, the LoRA adapter, the tokenizer
	BaseDir       = "base" // its base model: config.json, weights, tokenizer
)

// Files returns the bundled test checkpoint's files, read-only: CheckpointDir and BaseDir.
func Files() fs.FS {
	sub, err := fs.Sub(model, "model")
	if err != nil {
		panic(err) // the embedded directory is there by construction
	}
	return sub
}

// WriteModel writes the bundled test checkpoint into dir (which must exist) and returns its checkpoint and base
// directories there, to pass to kev.Load as the checkpoint and Options.Base.
func WriteModel(dir string) (checkpoint, base string, err error) {
	for _, sub := range []string{CheckpointDir, BaseDir} {
		if err := copyDir(Files(), sub, filepath.Join(dir, sub)); err != nil {
			return "", "", fmt.Errorf("kevtest: writing the bundled checkpoint: %w", err)
		}
	}
	return filepath.Join(dir, CheckpointDir), filepath.Join(dir, BaseDir), nil
}

// Checkpoint writes the bundled test checkpoint into a directory of t.TempDir() and returns its checkpoint and base
// directories; it fails the test if it cannot.
func Checkpoint(t TB) (checkpoint, base string) {
	t.Helper()
	checkpoint, base, err := WriteModel(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint, base
}

// NewPredictor loads the bundled test checkpoint with opts (Base is set to the bundled base; Progress, when nil,
// to io.Discard) and closes it when the test ends. It fails the test if the load fails.
func NewPredictor(t TB, opts kev.Options) *kev.Predictor {
	t.Helper()
	checkpoint, base := Checkpoint(t)
	opts.Base = base
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	p, err := kev.Load(context.Background(), checkpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// copyDir copies the flat directory src of fsys into the new directory dst.
func copyDir(fsys fs.FS, src, dst string) error {
	entries, err := fs.ReadDir(fsys, src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
