package torchpt_test

import (
	"fmt"

	"github.com/kevgo/kev/internal/torchpt"
)

func ExampleLoad() {
	v, err := torchpt.Load("testdata/head.pt")
	if err != nil {
		panic(err)
	}
	meta := v.(*torchpt.Dict)
	temp, _ := meta.Get("temperature")
	head, _ := meta.Get("head")
	qb, _ := head.(*torchpt.Dict).Get("q.bias")
	vals, _ := qb.(*torchpt.Tensor).Float32()
	fmt.Println(temp, qb.(*torchpt.Tensor).Shape, len(vals))
	// Output: 2.41 [4] 4
}
