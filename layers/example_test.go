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

// ExampleModel_Forward runs two requests in one pass: a new state with two
// question rows (its state kept for later), and a row continuing a cached
// state. The output holds the rows' final hidden states, one after another.
func ExampleModel_Forward() {
	b, err := tensor.Open("cpu")
	if err != nil {
		panic(err)
	}
	m, err := New(b, randomWeights(rand.New(rand.NewPCG(1, 2)), smallConfig(), true))
	if err != nil {
		panic(err)
	}
	cached, h, err := m.Prefill([]int32{3, 14, 15})
	if err != nil {
		panic(err)
	}
	b.Free(h)
	defer cached.Free()
	out, err := m.Forward(&Batch{
		New: []NewState{{IDs: []int32{2, 7, 1, 8}, Keep: true}},
		Rows: []Row{
			{IDs: []int32{5, 35, 8}, New: 0},
			{IDs: []int32{9, 7}, New: 0},
			{IDs: []int32{4, 4}, Cached: cached},
		},
	})
	if err != nil {
		panic(err)
	}
	defer out.Free()
	defer out.States[0].Free()
	fmt.Println("row offsets:", out.At, "kept state tokens:", out.States[0].Len)
	// Output: row offsets: [{0 0} {0 3} {0 5}] kept state tokens: 4
}
