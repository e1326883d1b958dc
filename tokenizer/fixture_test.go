package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestGoldenFixtures encodes the Kev records of the golden fixtures
// (testdata/golden/*/reference/cases*.json, made with Hugging Face
// tokenizers) with the fixture's own tokenizer, loaded by LoadDir: the
// state row, every question's branch, and the output token count.
func TestGoldenFixtures(t *testing.T) {
	files, _ := filepath.Glob("../testdata/golden/*/reference/cases*.json")
	if len(files) == 0 {
		t.Skip("no golden fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(f)))+"/"+filepath.Base(f), func(t *testing.T) {
			checkFixture(t, f)
		})
	}
}

func checkFixture(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Delimiters map[string]int `json:"delimiters"`
		PadID      int            `json:"pad_id"`
		Cases      []struct {
			Name      string `json:"name"`
			StateText string `json:"state_text"`
			StateIDs  []int  `json:"state_ids"`
			Rows      []struct {
				QID   string `json:"qid"`
				IDs   []int  `json:"ids"`
				Texts struct {
					Instr   string   `json:"instr"`
					Options []string `json:"options"`
				} `json:"texts"`
			} `json:"rows"`
			OutputText   string `json:"output_text"`
			OutputTokens int    `json:"output_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatal(err)
	}
	tk, err := LoadDir(filepath.Join(filepath.Dir(filepath.Dir(path)), "base"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.PadID(); got != fx.PadID {
		t.Errorf("PadID = %d, want %d", got, fx.PadID)
	}
	names := map[string]string{"state": "<|fim_prefix|>", "q": "<|fim_middle|>", "opt": "<|box_start|>",
		"/opt": "<|box_end|>", "decide": "<|fim_suffix|>"}
	d := map[string]int{}
	for role, tok := range names {
		id, ok := tk.TokenID(tok)
		if !ok || id != fx.Delimiters[role] {
			t.Fatalf("TokenID(%q) = %d, %v, want %d", tok, id, ok, fx.Delimiters[role])
		}
		d[role] = id
	}
	rows := 0
	for _, c := range fx.Cases {
		state := append([]int{d["state"]}, tk.EncodeEscaped(c.StateText)...)
		if !slices.Equal(state, c.StateIDs) {
			t.Errorf("%s: state ids\n got %v\nwant %v", c.Name, state, c.StateIDs)
		}
		for _, r := range c.Rows {
			ids := append([]int{d["q"]}, tk.EncodeEscaped(r.Texts.Instr)...)
			for _, o := range r.Texts.Options {
				ids = append(ids, d["opt"])
				ids = append(ids, tk.EncodeEscaped(o)...)
				ids = append(ids, d["/opt"])
			}
			ids = append(ids, d["decide"])
			if !slices.Equal(ids, r.IDs) {
				t.Errorf("%s/%s: branch ids\n got %v\nwant %v", c.Name, r.QID, ids, r.IDs)
			}
			rows++
		}
		if got := len(tk.Encode(c.OutputText)); got != c.OutputTokens {
			t.Errorf("%s: output_tokens = %d, want %d", c.Name, got, c.OutputTokens)
		}
	}
	t.Logf("%d cases, %d rows", len(fx.Cases), rows)
}
