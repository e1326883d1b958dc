package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// CheckpointLayout says what a Kev checkpoint directory holds.
const CheckpointLayout = "a Kev checkpoint directory holds head.pt (the pointer head) and either a LoRA adapter " +
	"(adapter_config.json and adapter_model.safetensors, applied to the base model head.pt names or to the one " +
	"given as the base) or full weights (config.json, model*.safetensors and tokenizer.json)"

// BaseLayout says what a base model directory holds.
const BaseLayout = "a base model directory holds config.json, model*.safetensors (or model.safetensors.index.json " +
	"and its shards) and tokenizer.json"

// LayoutError reports a directory that lacks a file a Kev checkpoint (or, with Base set, a base model) must hold.
// Its message says what the directory holds instead (nothing, a base model, an adapter without its head, a
// checkpoint given as the base) and what it should hold.
type LayoutError struct {
	Dir     string
	Base    bool   // the directory was given as the base model
	Missing string // the file that is not there, e.g. "head.pt"
	Holds   string // what the directory holds instead, in words
	Err     error  // the missing file's error (it unwraps to fs.ErrNotExist)
}

// Error names the directory, what is missing, what is there and what should be.
func (e *LayoutError) Error() string {
	what, layout := "a Kev checkpoint", CheckpointLayout
	if e.Base {
		what, layout = "a base model", BaseLayout
	}
	return "checkpoint: " + e.Dir + " is not " + what + ": no " + e.Missing + "; " + e.Holds + ". " +
		strings.ToUpper(layout[:1]) + layout[1:]
}

// Unwrap returns the missing file's error.
func (e *LayoutError) Unwrap() error { return e.Err }

// CheckLayout reports whether dir holds the files a Kev checkpoint needs (head.pt), or, when base is true, those
// of a base model (config.json and tokenizer.json). It returns nil when they are there, else a *LayoutError that
// describes what dir holds. A dir that cannot be read at all is reported by its own error.
func CheckLayout(dir string, base bool) error {
	required := []string{HeadFile}
	if base {
		required = []string{ConfigFile, "tokenizer.json"}
	}
	for _, f := range required {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			if !os.IsNotExist(err) {
				return err
			}
			return &LayoutError{Dir: dir, Base: base, Missing: f, Holds: describeDir(dir, base), Err: err}
		}
	}
	return nil
}

// describeDir says in words what a directory given as a checkpoint (or as the base) holds.
func describeDir(dir string, base bool) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "it cannot be listed (" + err.Error() + ")"
	}
	if len(entries) == 0 {
		return "the directory is empty"
	}
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	switch {
	case base && has(HeadFile):
		return "it holds a Kev checkpoint (head.pt): give it as the checkpoint, and as the base the model it was trained on"
	case base:
	case has(AdapterConfigFile):
		return "it holds a LoRA adapter (adapter_config.json) but not the head.pt beside it"
	case has(ConfigFile) && hasModelFiles(dir):
		return "it holds a base model (config.json and model weights): give it as the base, and the Kev checkpoint as the checkpoint"
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 6 {
		names = append(names[:6], "...")
	}
	return "it holds " + strings.Join(names, ", ")
}
