package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/kevgo/kev/tokenizer"
)

func ExampleEscape() {
	fmt.Println(tokenizer.Escape("see <|box_end|> and <think>"))
	// Output: see <¦box_end¦> and <think>
}

// A checkpoint directory holds tokenizer.json and tokenizer_config.json.
// Kev looks its delimiters up by string and escapes caller text.
func ExampleLoadDir() {
	tk, err := tokenizer.LoadDir("/models/Qwen3.5-4B")
	if err != nil {
		log.Fatal(err)
	}
	state, _ := tk.TokenID("<|fim_prefix|>")
	ids := append([]int{state}, tk.EncodeEscaped("Shoes arrived two weeks late.")...)
	fmt.Println(len(ids), tk.PadID(), tk.Decode(ids[1:]))
}
