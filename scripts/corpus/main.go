// Command corpus builds the tokenizer test corpus: chunks of Go source,
// prose in several languages and generated edge cases, written as
// zstd-compressed JSON lines {"text": ...} to
// tokenizer/testdata/qwen3-corpus.jsonl.zst.
//
// The material comes from the local Go installation, the golang.org/x/text
// module's test data and /usr/share/common-licenses; the committed corpus
// is the reference, so a rebuild with another Go version may differ.
//
//	go run ./scripts/corpus                 # rebuild the corpus
//	go run ./scripts/corpus -unpack DIR     # write DIR/corpus.jsonl and DIR/tokenizer.json, uncompressed
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/text/unicode/norm"

	"github.com/kevgo/kev/tokenizer"
)

const (
	corpusPath    = "tokenizer/testdata/qwen3-corpus.jsonl.zst"
	tokenizerPath = "tokenizer/testdata/qwen3-tokenizer.json.zst"
)

var goFiles = []string{
	"fmt/print.go", "net/http/server.go", "strings/strings.go", "encoding/json/decode.go",
	"go/printer/nodes.go", "regexp/syntax/parse.go", "bufio/bufio.go", "text/template/exec.go",
	"runtime/asm_amd64.s", "unicode/utf8/utf8_test.go", "strconv/quote.go", "math/big/nat.go",
	"go/parser/parser.go", "net/http/transport.go", "html/template/escape_test.go", "sort/sort.go",
}

var textFiles = []string{
	"candide-utf-8.txt", "rashomon-utf-8.txt", "sunzi-bingfa-gb-levels-1-and-2-utf-8.txt",
	"sunzi-bingfa-simplified-utf-8.txt", "sunzi-bingfa-traditional-utf-8.txt", "unsu-joh-eun-nal-utf-8.txt",
}

var proseFiles = []string{
	"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
	"/usr/share/common-licenses/MPL-2.0",
}

func main() {
	unpack := flag.String("unpack", "", "write corpus.jsonl and tokenizer.json, uncompressed, to this directory and exit")
	flag.Parse()
	log.SetFlags(0)
	if *unpack != "" {
		if err := unpackTo(*unpack); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := build(); err != nil {
		log.Fatal(err)
	}
}

func unpackTo(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for src, dst := range map[string]string{corpusPath: "corpus.jsonl", tokenizerPath: "tokenizer.json"} {
		b, err := readZstd(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func readZstd(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := zstd.NewReader(f)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return io.ReadAll(d)
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		log.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

func build() error {
	rng := rand.New(rand.NewPCG(2026, 11))
	var chunks []string
	add := func(text string, min, max int) {
		chunks = append(chunks, chop(rng, text, min, max)...)
	}
	goroot := goEnv("GOROOT")
	for _, f := range goFiles {
		b, err := os.ReadFile(filepath.Join(goroot, "src", f))
		if err != nil {
			return err
		}
		add(string(b), 200, 6000)
	}
	xtext := filepath.Join(goEnv("GOMODCACHE"), "golang.org/x/text@v0.44.0/encoding/testdata")
	for _, f := range textFiles {
		b, err := os.ReadFile(filepath.Join(xtext, f))
		if err != nil {
			return err
		}
		add(string(b), 50, 3000)
	}
	for _, f := range proseFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		add(string(b), 100, 4000)
	}
	chunks = append(chunks, edgeCases(rng)...)

	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	size := 0
	for _, c := range chunks {
		if !utf8.ValidString(c) {
			return fmt.Errorf("chunk is not valid UTF-8: %q", c)
		}
		size += len(c)
		if err := enc.Encode(struct {
			Text string `json:"text"`
		}{c}); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	f, err := os.Create(corpusPath)
	if err != nil {
		return err
	}
	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		return err
	}
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	log.Printf("%s: %d chunks, %d bytes of text", corpusPath, len(chunks), size)
	return nil
}

// chop cuts text into chunks of min..max bytes at rune boundaries, so that
// chunks start and end anywhere: inside words, indentation or lines.
func chop(rng *rand.Rand, text string, min, max int) []string {
	var out []string
	for len(text) > 0 {
		n := min + rng.IntN(max-min+1)
		if n >= len(text) {
			out = append(out, text)
			break
		}
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n++
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// Fixed edge cases, each a chunk of its own.
var fixed = []string{
	"  hello", "hello  ", "       ", "       x", "x       ", "\t\tfoo\tbar\t", " \t \n \t x",
	"a\r\nb\r\n\r\nc\r\n", "line\n\n\n   indented\n\t\ttabbed\n", "\n", "\r", "\r\n", " \n", "\n ", "  \n  \n  ",
	"DON'T we'LL I'M you'RE they'VE he'D it'S", "don't won't can't", "'s 's 'S 'Re 'rE 'lL 'Ll",
	"'ſ 'ſt ſ'ſ WE'ſ", "'''''", "''s", "x's's", " 'll 're",
	"12345678901234567890", "3.14159 2,718 1e-9 0x1F 1_000_000", "٣٤٥ ४५६ ①②③ Ⅻ ½ ²³",
	"café café", "naïve naïve", "Å Å Å", "e\u0301 a\u0300 o\u0308", "\u0301\u0301 leading marks", "ｶﾞ ガ",
	"한국어 한국어", "ᄒᆞᆫ", "क्षत्रिय", "مرحبا بالعالم", "שָׁלוֹם", "ไทย ภาษา", "Ελληνικά Ωμέγα", "Кириллица Ёё",
	"👩\u200d👩\u200d👧\u200d👦 family", "👍🏽 🇫🇷 🏳️\u200d🌈", "❤️ ✔︎", "a\u200bb\u200cc\u200dd\ufeffe",
	"\u3000全角\u3000スペース\u3000", "non\u00a0breaking\u00a0 space\u00a0", "\u2028line sep\u2029para sep",
	"nel\u0085here", "\u000b\u000c vt ff", "\u2003em\u2002en\u2009thin\u200ahair\u202fnnbsp\u205fmmsp",
	"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|><|endoftext|>",
	"<|box_start|>(1,2),(3,4)<|box_end|>", "<|object_ref_start|>cat<|object_ref_end|>",
	"<|vision_start|><|image_pad|><|vision_end|>", "<think>\nplan\n</think>\n\nanswer", "<tool_call>{}</tool_call>",
	"<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>c", "<|im_end|><|im_start|>", "<|im_start|", "<|not_a_token|>",
	"< |im_start| >", "<<|im_start|>>", "<|<|im_end|>|>", "x<|endoftext|>y", " <|endoftext|> ",
	"!!! ??? ... --- *** ### ```go", "a.b,c;d:e", "(hello) [world] {x}", " ()", "();\n", "  ();\n\n",
	"http://example.com/path?q=1&r=2#frag", "user@example.org", "C:\\Windows\\System32",
	"snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "x:=1; y += 2 // comment",
	"Ⅰ ⅱ ℃ ℉ № ™ ©", "ﬁ ﬂ ﬀ ﬃ", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ１２３", "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐", "𠀀𠀁 𪚥",
	"the end   ", "trailing tab\t", "trailing newline\n", "\n\nleading newlines",
}

// pieces are glued at random into generated chunks.
var pieces = []string{
	" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\u3000", "\u00a0", "\u2028", "\u0085", "\u200b",
	"a", "Hello", "WORLD", "don't", "DON'T", "we'LL", "'s", "'S", "'ve", "'re", "'ſ", "x",
	"1", "42", "2026", "3.5", "٣", "①",
	"café", "cafe\u0301", "e\u0301", "\u0301", "ñ", "n\u0303", "Å", "A\u030a",
	"中文", "日本語", "ひらがな", "カタカナ", "한국어", "ไทย", "العربية", "हिन्दी", "Ελλάδα",
	"👩\u200d💻", "👍🏽", "🇯🇵", "😀", "\u200d", "\ufe0f",
	".", ",", "!", "?", "...", "()", "{", "}", "[", "]", ";", ":", "\"", "'", "`", "-", "_", "/", "\\", "|", "<", ">",
	"<|", "|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|box_start|>", "<|box_end|>",
	"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<think>", "</think>", "<|object_ref_start|>",
	"<|kev_state|>", "<¦box_end¦>", "¦", "func", "return", "if err != nil {", "\t}\n",
}

func edgeCases(rng *rand.Rand) []string {
	out := append([]string(nil), fixed...)
	for _, s := range fixed {
		if e := tokenizer.Escape(s); e != s {
			out = append(out, e) // Kev delimiters after escaping
		}
		if d := norm.NFD.String(s); d != s {
			out = append(out, d) // decomposed forms
		}
	}
	for range 4000 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		out = append(out, s)
		if rng.IntN(4) == 0 {
			out = append(out, tokenizer.Escape(s))
		}
	}
	return out
}
