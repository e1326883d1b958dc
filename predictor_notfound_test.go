package kev

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadNotFound checks the errors of names found nowhere: each says where it looked, locally and on the hub,
// and what to pass. A relative name of two parts (which could be a hub name) names both the local directory and
// the hub; a name that can only be a path never asks the hub; a checkpoint without Options.Base whose base is not
// to be had names head.pt, Options.Base and -base.
func TestLoadNotFound(t *testing.T) {
	s := goldenSets(t)[0]
	t.Setenv("HF_HUB_CACHE", t.TempDir()) // an empty cache; offline, the hub itself is never asked
	cwd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, base string
		hub        bool     // the hub was asked
		want       []string // in the message
	}{
		{"checkpoints/kev-4b", "", true, []string{"no directory " + filepath.Join(cwd, "checkpoints", "kev-4b"), "the hub could not serve it", "checkpoint directory", "offline"}},
		{"./checkpoints/kev-4b", "", false, []string{"no directory " + filepath.Join(cwd, "checkpoints", "kev-4b"), "checkpoint directory"}},
		{s.kev, "", true, []string{"head.pt names it as the base model", "Options.Base", "-base", "offline"}},
		{s.kev, "./no-base", false, []string{"no directory " + filepath.Join(cwd, "no-base"), "Options.Base"}},
	} {
		_, err := Load(context.Background(), c.name, Options{Base: c.base, Offline: true})
		var le *LoadError
		var nf *NotFoundError
		if !errors.As(err, &le) || !errors.As(err, &nf) {
			t.Errorf("%s (base %q): %v, want a *LoadError wrapping a *NotFoundError", c.name, c.base, err)
			continue
		}
		if (nf.Hub != nil) != c.hub || errors.Is(err, fs.ErrNotExist) == c.hub {
			t.Errorf("%s (base %q): hub asked %v (%v), want %v", c.name, c.base, nf.Hub != nil, nf.Hub, c.hub)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s (base %q): %q does not say %q", c.name, c.base, err, w)
			}
		}
	}
}
