//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// attnConfigs are attention-only models (Kev's previous generation) at an aligned width with Qwen3-4B's head_dim.
func attnConfigs() map[string]qwen35.Config {
	full := []qwen35.LayerType{qwen35.FullAttention, qwen35.FullAttention, qwen35.FullAttention}
	return map[string]qwen35.Config{
		"qwen3": {Arch: qwen35.Qwen3, HiddenSize: 256, NumLayers: 3, IntermediateSize: 512, VocabSize: 320,
			RMSNormEps: 1e-6, LayerTypes: full, NumHeads: 4, NumKVHeads: 2, HeadDim: 128, RopeTheta: 1e6,
			PartialRotaryFactor: 1},
		"qwen2": {Arch: qwen35.Qwen2, QKVBias: true, HiddenSize: 256, NumLayers: 3, IntermediateSize: 512,
			VocabSize: 320, RMSNormEps: 1e-6, LayerTypes: full, NumHeads: 4, NumKVHeads: 2, HeadDim: 64,
			RopeTheta: 1e6, PartialRotaryFactor: 1},
	}
}

// attnWeights draws random weights for every tensor the config implies: bf16 matrices σ ~ 1/√in, plain norm gains
// around 1, fp32 biases.
func attnWeights(r *rand.Rand, c qwen35.Config) *qwen35.Weights {
	w := &qwen35.Weights{Config: c, Tensors: map[string]*qwen35.Tensor{}}
	for name, shape := range checkpoint.ExpectedShapes(&c) {
		switch {
		case len(shape) == 2:
			scale := 1 / math.Sqrt(float64(shape[1]))
			if name == "embed_tokens.weight" {
				scale = 1
			}
			v := randVals(r, tensor.Numel(shape), scale*math.Sqrt(3))
			t := &qwen35.Tensor{Shape: shape, DType: qwen35.BF16, BF16: make([]uint16, len(v))}
			for i, x := range v {
				t.BF16[i] = half.BF16FromF32(x)
			}
			w.Tensors[name] = t
		case strings.HasSuffix(name, "norm.weight"):
			v := randVals(r, shape[0], 0.2)
			for i := range v {
				v[i]++
			}
			w.Tensors[name] = &qwen35.Tensor{Shape: shape, DType: qwen35.F32, F32: v}
		default:
			w.Tensors[name] = &qwen35.Tensor{Shape: shape, DType: qwen35.F32, F32: randVals(r, shape[0], 0.5)}
		}
	}
	return w
}

// TestAttnModelMatchesCPU runs Kev's packed block-causal pass of an attention-only model (the state once, three
// question rows attending to it) on "cpu" (fp32) and "cuda" (bf16), then the same rows from the kept state (a
// cache hit), which on the GPU must give the packed pass's rows bit for bit, and the same request in a batch with
// another one, which must not change them either.
func TestAttnModelMatchesCPU(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	cb := cpu.New()
	for name, c := range attnConfigs() {
		t.Run(name, func(t *testing.T) {
			w := attnWeights(r, c)
			mc, err := layers.New(cb, w)
			if err != nil {
				t.Fatal(err)
			}
			mg, err := layers.New(gb, w)
			if err != nil {
				t.Fatal(err)
			}
			state := randomIDs(r, 90, c.VocabSize)
			rows := [][]int32{randomIDs(r, 9, c.VocabSize), randomIDs(r, 1, c.VocabSize), randomIDs(r, 40, c.VocabSize)}
			packed := &layers.Batch{New: []layers.NewState{{IDs: state, Keep: true}}}
			for _, ids := range rows {
				packed.Rows = append(packed.Rows, layers.Row{IDs: ids})
			}
			oc, err := mc.Forward(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer oc.Free()
			defer oc.States[0].Free()
			og, err := mg.Forward(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer og.Free()
			defer og.States[0].Free()
			compareHidden(t, "packed", cb, oc.Hidden[0], gb, og.Hidden[0], 2e-2)
			gotPacked, err := gb.ToHost(og.Hidden[0])
			if err != nil {
				t.Fatal(err)
			}
			dd := c.HiddenSize
			branch := gotPacked[og.At[0].Off*dd:] // the rows' hidden states (the pass returns only theirs)

			hit := &layers.Batch{}
			for _, ids := range rows {
				hit.Rows = append(hit.Rows, layers.Row{IDs: ids, Cached: og.States[0]})
			}
			oh, err := mg.Forward(hit)
			if err != nil {
				t.Fatal(err)
			}
			defer oh.Free()
			gotHit, err := gb.ToHost(oh.Hidden[0])
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(gotHit, branch); e > 2e-2 {
				t.Errorf("cache hit vs packed rows: relative error %.3g", e)
			} else {
				t.Logf("cache hit vs packed rows: relative error %.3g (bit-identical: %v)", e, e == 0)
			}

			other := randomIDs(r, 33, c.VocabSize)
			both := &layers.Batch{New: []layers.NewState{{IDs: other}, {IDs: state}},
				Rows: []layers.Row{{IDs: randomIDs(r, 12, c.VocabSize), New: 0}}}
			for _, ids := range rows {
				both.Rows = append(both.Rows, layers.Row{IDs: ids, New: 1})
			}
			ob, err := mg.Forward(both)
			if err != nil {
				t.Fatal(err)
			}
			defer ob.Free()
			gotBoth, err := gb.ToHost(ob.Hidden[0])
			if err != nil {
				t.Fatal(err)
			}
			lo := ob.At[1].Off * dd
			mine := gotBoth[lo : lo+len(branch)]
			for i := range branch {
				if mine[i] != branch[i] {
					t.Fatalf("rows in a batch with another request differ from the packed pass alone at %d: %v vs %v", i, mine[i], branch[i])
				}
			}
			t.Logf("rows batched with another request: bit-identical to the request alone")
		})
	}
}
