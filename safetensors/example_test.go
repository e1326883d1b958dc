package safetensors_test

import (
	"bytes"
	"fmt"

	"github.com/kevgo/kev/safetensors"
)

func Example() {
	w, _ := safetensors.FromFloat32("layers.0.mlp.up_proj.weight", safetensors.BF16, []int{2, 3},
		[]float32{0.5, -1.25, 3, 1.0 / 3, 2, -7})
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, []safetensors.Tensor{w}, map[string]string{"format": "pt"}); err != nil {
		panic(err)
	}
	f, err := safetensors.Parse("example.safetensors", buf.Bytes())
	if err != nil {
		panic(err)
	}
	t, _ := f.Tensor("layers.0.mlp.up_proj.weight")
	vals, _ := t.Float32()
	fmt.Println(t.DType, t.Shape, vals)
	// Output: BF16 [2 3] [0.5 -1.25 3 0.33398438 2 -7]
}
