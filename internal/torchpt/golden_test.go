package torchpt

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kevgo/kev/safetensors"
)

// The head.pt files of the golden fixtures were written by torch.save itself.
func TestGoldenHeadFiles(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/golden/*/kev*/head.pt")
	if len(paths) == 0 {
		t.Skip("golden fixtures not present")
	}
	wantKeys := []any{"args", "suite_sha256", "base", "head", "base_revision", "lora", "head_dim",
		"option_isolation", "special_embeddings", "weights_dtype", "temperature", "holdout", "weights"}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			v, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			top := v.(*Dict)
			if !reflect.DeepEqual(top.Keys(), wantKeys) {
				t.Fatalf("keys %v", top.Keys())
			}
			hv, _ := top.Get("head")
			head := hv.(*Dict)
			if head.Class != "collections.OrderedDict" || head.Attrs == nil {
				t.Errorf("head: class %q, attrs %v", head.Class, head.Attrs)
			}
			refPath := filepath.Join(filepath.Dir(filepath.Dir(p)), "reference", "head.safetensors")
			if _, err := os.Stat(refPath); err != nil {
				t.Skip("no reference/head.safetensors")
			}
			ref, err := safetensors.Open(refPath)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			for _, name := range []string{"q.weight", "q.bias", "k.weight", "k.bias"} {
				tv, _ := head.Get(name)
				tn := tv.(*Tensor)
				got, err := tn.Float32()
				if err != nil {
					t.Fatal(err)
				}
				rt, _ := ref.Tensor(name)
				want, _ := rt.Float32()
				if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(tn.Shape, rt.Shape) {
					t.Errorf("%s differs from %s", name, refPath)
				}
			}
		})
	}
}
