package checkpoint

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
)

func TestProductWeight(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"layers.0.self_attn.q_proj.weight", true},
		{"layers.3.self_attn.k_proj.weight", true},
		{"layers.3.self_attn.v_proj.weight", true},
		{"layers.11.self_attn.o_proj.weight", true},
		{"layers.0.linear_attn.in_proj_qkv.weight", true},
		{"layers.0.linear_attn.in_proj_z.weight", true},
		{"layers.0.linear_attn.in_proj_b.weight", true},
		{"layers.0.linear_attn.in_proj_a.weight", true},
		{"layers.0.linear_attn.out_proj.weight", true},
		{"layers.2.mlp.gate_proj.weight", true},
		{"layers.2.mlp.up_proj.weight", true},
		{"layers.2.mlp.down_proj.weight", true},
		{"embed_tokens.weight", false},
		{"norm.weight", false},
		{"layers.0.input_layernorm.weight", false},
		{"layers.0.post_attention_layernorm.weight", false},
		{"layers.0.self_attn.q_norm.weight", false},
		{"layers.0.self_attn.q_proj.bias", false},
		{"layers.0.self_attn.o_proj.bias", false},
		{"layers.0.linear_attn.conv1d.weight", false},
		{"layers.0.linear_attn.A_log", false},
		{"layers.0.linear_attn.dt_bias", false},
		{"layers.0.linear_attn.norm.weight", false},
		{"mlp.gate_proj.weight", false},
		{"layers..mlp.gate_proj.weight", false},
		{"layers.0.mlp.gate_proj.weight.extra", false},
	} {
		if got := ProductWeight(c.name); got != c.want {
			t.Errorf("ProductWeight(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestProductsF32 builds each golden checkpoint in bf16 with ProductsF32, with Open and with OpenStream: every
// matrix-product weight must be Open's fp32 tensor bit for bit (the fp32 merge, unrounded), every other tensor
// Open's bf16 one, and every fixture must have product weights of each kind its layers have.
func TestProductsF32(t *testing.T) {
	for _, fx := range goldenFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := goldenDir(t, fx)
			kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
			f32, err := Open(kev, base, Options{DType: qwen35.F32})
			if err != nil {
				t.Fatal(err)
			}
			bf16, err := Open(kev, base, Options{DType: qwen35.BF16})
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{DType: qwen35.BF16, ProductsF32: true}
			got, err := Open(kev, base, opts)
			if err != nil {
				t.Fatal(err)
			}
			st, err := OpenStream(kev, base, StreamOptions{Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			products := 0
			for name, w32 := range f32.Weights.Tensors {
				want := bf16.Weights.Tensors[name]
				if ProductWeight(name) {
					want = w32
					products++
				}
				streamed, err := st.Weights.Lookup(name, want.Shape...)
				if err != nil {
					t.Fatal(err)
				}
				for how, g := range map[string]*qwen35.Tensor{"Open": got.Weights.Tensors[name], "OpenStream": streamed} {
					if g.DType != want.DType || !reflect.DeepEqual(g.F32, want.F32) || !reflect.DeepEqual(g.BF16, want.BF16) {
						t.Errorf("%s %s: %v, want the %v tensor of DType %v", how, name, g.DType, want.DType, want.DType)
					}
				}
				st.Weights.Release(name)
			}
			c := &f32.Weights.Config
			perLayer := 0
			for _, lt := range c.LayerTypes {
				perLayer += 3 // the MLP
				if lt == qwen35.FullAttention {
					perLayer += 4
				} else {
					perLayer += 5
				}
			}
			if products != perLayer {
				t.Errorf("%d product weights, want %d", products, perLayer)
			}
		})
	}
}
