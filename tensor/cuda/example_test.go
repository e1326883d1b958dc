//go:build cuda

package cuda_test

import (
	"fmt"

	"github.com/kevgo/kev/tensor/cuda"
)

// ExampleQueue_GEMM multiplies 16 token rows by a [2560, 9216] weight and adds the product to the residual
// stream in place, as the MLP's down projection does.
func ExampleQueue_GEMM() {
	d, err := cuda.Open(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	const M, N, K = 16, 2560, 9216
	err = d.Do(func(q *cuda.Queue) error {
		x, _ := q.Alloc(2 * M * K) // activations, bf16 [M, K]
		w, _ := q.Alloc(2 * N * K) // weight, bf16 [N, K]
		h, _ := q.Alloc(2 * M * N) // residual stream, bf16 [M, N]
		defer q.Free(x)
		defer q.Free(w)
		defer q.Free(h)
		for i, b := range []cuda.Buffer{x, w, h} {
			if err := q.FillUniform(b, b.Bytes/2, uint32(i), 0.1); err != nil {
				return err
			}
		}
		if err := q.GEMM(cuda.GEMM{Y: h, R: h, X: x, W: w, M: M, N: N, K: K}); err != nil {
			return err
		}
		return q.Sync()
	})
	if err != nil {
		fmt.Println(err)
	}
}
