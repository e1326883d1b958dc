package systemone

import (
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

const permuteRequest = `{"state":"s","questions":{"q":{"type":"choice","instructions":"Pick","criteria":{"a":null,"b":null}}}}`

func TestLaxInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // "" for an error
	}{
		{`6`, "6"}, {`-5`, "-5"}, {`true`, "1"}, {`false`, "0"}, {`6.0`, "6"}, {`1e3`, "1000"}, {`6.5`, ""},
		{`"6"`, "6"}, {`" 7\n"`, "7"}, {`"1_000"`, "1000"}, {`"6.00"`, "6"}, {`"-6.0"`, "-6"}, {`"6."`, ""},
		{`"1__0"`, ""}, {`"_1"`, ""}, {`"0x10"`, ""}, {`"6e0"`, ""}, {`""`, ""}, {`null`, ""}, {`[]`, ""},
		{`NaN`, ""}, {`123456789012345678901234567890`, "123456789012345678901234567890"},
	} {
		n, fe := laxInt(parse(t, c.in), "f")
		switch {
		case c.want == "" && fe == nil:
			t.Errorf("%s: accepted as %s", c.in, n)
		case c.want != "" && (fe != nil || n.String() != c.want):
			t.Errorf("%s: %v %v, want %s", c.in, n, fe, c.want)
		}
	}
}

func FuzzPermuteRequest(f *testing.F) {
	f.Add(`{"request":` + permuteRequest + `,"question":"q","n_perm":3,"seed":"7"}`)
	f.Add(`{"request":` + permuteRequest + `,"question":"q","n_perm":1e400,"seed":-1e2}`)
	f.Add(`{"request":[],"question":null,"n_perm":"1_0","seed":true}`)
	f.Add(`[1,2]`)
	f.Fuzz(func(t *testing.T, body string) {
		v, err := pyjson.Parse([]byte(body))
		if err != nil {
			return
		}
		pr, err := PermuteRequestFromValue(v)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("%v", err)
			}
			return
		}
		if pr.NPerm < MinPermutations || pr.NPerm > MaxPermutations || pr.Seed == nil || pr.Request == nil {
			t.Fatalf("accepted %+v", pr)
		}
	})
}

func ExamplePermuteOrders() {
	// Python: r = random.Random(0); then for each run after the first, r.shuffle(a fresh copy of the keys).
	for _, o := range PermuteOrders([]string{"returns", "shipping", "billing"}, 3, big.NewInt(0)) {
		fmt.Println(o)
	}
	// Output:
	// [returns shipping billing]
	// [returns billing shipping]
	// [billing shipping returns]
}

func ExampleModelCard_Description() {
	c := ModelCard{Base: "Qwen/Qwen3.5-4B-Base", Run: "jaredpalmer/kev-4b", Temperature: 2.41}
	fmt.Println(c.Description())
	// Output: Kev pointer head on Qwen/Qwen3.5-4B-Base, serving jaredpalmer/kev-4b at temperature 2.41
}
