package main

import (
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// bundled holds what the command needs to run outside the repository (after go install): the small random test
// checkpoint of testdata/golden/tiny-a (its kev and base directories, file for file) and Kev's serving benchmark
// cases (scripts/golden/bench-cases.json). TestBundledMatchesRepository keeps the copies equal to the originals.
//
//go:embed bundled
var bundled embed.FS

// Names inside bundled.
const (
	bundledDir      = "bundled"
	bundledRun      = "tiny-a/kev"  // the Kev checkpoint (adapter, head.pt, tokenizer)
	bundledBase     = "tiny-a/base" // its base model
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

// bundledModel writes the bundled checkpoint into a new temporary directory and returns the checkpoint and base
// directories in it and a function that removes the directory (call it after the predictor is closed).
func bundledModel() (run, base string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "kev-bundled-")
	if err != nil {
		return "", "", nil, fmt.Errorf("unpacking the bundled test checkpoint: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	for _, sub := range []string{bundledRun, bundledBase} {
		if err := copyEmbedded(path.Join(bundledDir, sub), filepath.Join(dir, filepath.FromSlash(sub))); err != nil {
			remove()
			return "", "", nil, fmt.Errorf("unpacking the bundled test checkpoint: %w", err)
		}
	}
	return filepath.Join(dir, filepath.FromSlash(bundledRun)), filepath.Join(dir, filepath.FromSlash(bundledBase)), remove, nil
}

// copyEmbedded copies the embedded directory src (flat: files only) into the new directory dst.
func copyEmbedded(src, dst string) error {
	entries, err := fs.ReadDir(bundled, src)
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
		in, err := bundled.Open(path.Join(src, e.Name()))
		if err != nil {
			return err
		}
		out, err := os.OpenFile(filepath.Join(dst, e.Name()), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			in.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
