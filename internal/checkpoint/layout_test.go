package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckLayout(t *testing.T) {
	mk := func(files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			p := filepath.Join(dir, f)
			if strings.HasSuffix(f, "/") {
				os.MkdirAll(p, 0o755)
				continue
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, c := range []struct {
		name  string
		dir   string
		base  bool
		want  []string // substrings of the message; nil: no error
		never string
	}{
		{"checkpoint", mk("head.pt", "adapter_config.json", "adapter_model.safetensors"), false, nil, ""},
		{"base", mk("config.json", "model.safetensors", "tokenizer.json"), true, nil, ""},
		{"empty", mk(), false, []string{"is not a Kev checkpoint: no head.pt; the directory is empty.", CheckpointLayout[1:]}, ""},
		{"base given as checkpoint", mk("config.json", "model-00001-of-00002.safetensors", "tokenizer.json"), false,
			[]string{"no head.pt", "holds a base model", "give it as the base", "adapter_config.json and adapter_model.safetensors"}, ""},
		{"adapter without head", mk("adapter_config.json", "adapter_model.safetensors"), false,
			[]string{"no head.pt", "LoRA adapter (adapter_config.json) but not the head.pt"}, ""},
		{"other files", mk("notes.txt", "weights/", "a.bin"), false, []string{"no head.pt; it holds a.bin, notes.txt, weights/."}, ""},
		{"checkpoint given as base", mk("head.pt", "adapter_config.json"), true,
			[]string{"is not a base model: no config.json", "holds a Kev checkpoint (head.pt)", BaseLayout[1:]}, "give it as the base,"},
		{"base without tokenizer", mk("config.json", "model.safetensors"), true,
			[]string{"no tokenizer.json; it holds config.json, model.safetensors."}, "give it as the base"},
		{"empty base", mk(), true, []string{"is not a base model: no config.json; the directory is empty"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckLayout(c.dir, c.base)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var le *LayoutError
			if !errors.As(err, &le) || !errors.Is(err, fs.ErrNotExist) || le.Dir != c.dir {
				t.Fatalf("%v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if c.never != "" && strings.Contains(err.Error(), c.never) {
				t.Errorf("%q says %q", err, c.never)
			}
		})
	}
	if err := CheckLayout(filepath.Join(t.TempDir(), "missing"), false); err == nil {
		t.Error("missing directory: no error")
	}
}

// TestOpenSaysWhatACheckpointHolds checks Open on a directory without head.pt explains the layout.
func TestOpenSaysWhatACheckpointHolds(t *testing.T) {
	_, err := Open(t.TempDir(), "", Options{})
	var le *LayoutError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "holds head.pt (the pointer head)") {
		t.Errorf("%v", err)
	}
}
