package main

import (
	"embed"
	"fmt"
	"os"

	"github.com/kevgo/kev/kevtest"
)

// bundled holds Kev's serving benchmark cases (scripts/golden/bench-cases.json), so that the command runs outside
// the repository (after go install); the small random test checkpoint comes from package kevtest.
// TestBundledMatchesRepository keeps the copy equal to the original.
//
//go:embed bundled
var bundled embed.FS

// Names inside bundled.
const (
	bundledDir      = "bundled"
	bundledRun      = "tiny-a/kev"      // how messages name the Kev checkpoint (adapter, head.pt, tokenizer)
	bundledBase     = "tiny-a/base"     // how messages name its base model
	bundledName     = "built-in/tiny-a" // the bundled checkpoint's Info.Run: /v1/models' run, kev_model_info's label
	bundledCases    = "bench-cases.json"
	bundledCasesRef = "built-in " + bundledCases // how reports and messages name the embedded cases file
)

// noCheckpointNote is printed when a command loads the bundled checkpoint because none was given: it says what
// the answers are worth and lists the ways to name a real checkpoint.
const noCheckpointNote = `kev: no checkpoint given, so using the small random test checkpoint built into this binary (its answers are
     exact but meaningless). To answer with a real model, pass one of:
       -checkpoint DIR                 a Kev checkpoint directory: head.pt and the LoRA adapter
                                       (adapter_config.json, adapter_model.safetensors) or full weights
                                       (config.json, model*.safetensors); -base DIR|NAME names its base model
                                       when head.pt's base is not wanted (tokenizer.json and weights)
       -checkpoint org/name[@revision] a Kev checkpoint on the Hugging Face Hub or in its local cache, e.g.
                                       jaredpalmer/kev-4b (add -offline to use the cache only)
       KEV_RUN=DIR|NAME                the same, from the environment (kev serve)`

// bundledModel writes the bundled checkpoint (package kevtest's) into a new temporary directory and returns the
// checkpoint and base directories in it and a function that removes the directory (call it after the predictor is
// closed).
func bundledModel() (run, base string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "kev-bundled-")
	if err != nil {
		return "", "", nil, fmt.Errorf("unpacking the bundled test checkpoint: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if run, base, err = kevtest.WriteModel(dir); err != nil {
		remove()
		return "", "", nil, err
	}
	return run, base, remove, nil
}
