package layers

import (
	"fmt"
	"math/rand/v2"

	"github.com/kevgo/kev/tensor"
	_ "github.com/kevgo/kev/tensor/cpu"
)

// ExampleModel runs Kev's row form on a small random model: the text once
// (Prefill), then two question rows continuing its state.
func ExampleModel() {
	b, err := tensor.Open("cpu")
	if err != nil {
		panic(err)
	}
	w := randomWeights(rand.New(rand.NewPCG(1, 2)), smallConfig(), true)
	m, err := New(b, w)
	if err != nil {
		panic(err)
	}
	state, _, err := m.Prefill([]int32{3, 14, 15, 9, 26})
	if err != nil {
		panic(err)
	}
	defer state.Free()
	h, err := m.ContinueRows(state, [][]int32{{5, 35, 8}, {9, 7}})
	if err != nil {
		panic(err)
	}
	fmt.Println("state tokens:", state.Len, "row hidden states:", h.Shape())
	// Output: state tokens: 5 row hidden states: [5 24]
}
