// Package tokenizer encodes text into token ids the way Hugging Face
// tokenizers does for the byte-level BPE tokenizers of the Qwen family
// (Qwen2, Qwen2.5, Qwen3, Qwen3.5), reading their tokenizer.json.
//
// The pipeline is the one tokenizer.json describes, applied with
// add_special_tokens=False:
//
//  1. added tokens (special or not) are split out first, leftmost-longest,
//     so "<|im_start|>" in the text becomes its one id;
//  2. every other piece is normalized (NFC for Qwen);
//  3. the pre-tokenizer splits it (Qwen's Split regex, then ByteLevel);
//  4. each split is encoded with BPE over its UTF-8 bytes, merges applied
//     lowest rank first, leftmost first among equal ranks.
//
// Qwen's split patterns are matched by a hand-written scanner that is
// exactly equivalent to the regular expression; any other pattern runs on
// Go's regexp with the "\s+(?!\S)" lookahead emulated.
//
// The ids match Hugging Face tokenizers 0.23 exactly on the 1.28 MB test
// corpus in testdata (Go code; prose in English, French, Chinese, Japanese
// and Korean; generated edge cases), with both Qwen3's and Qwen3.5's split
// patterns.
//
// Text that is not valid UTF-8 is first made valid by replacing each
// invalid byte with U+FFFD, as a Go range loop and encoding/json do; the
// ids are those of the replaced string.
//
// Escape neutralises Kev's delimiter-shaped tokens in caller text
// ("<|box_end|>" becomes "<¦box_end¦>") so that callers cannot forge them.
//
// EncodeLimit and EncodeEscapedLimit stop after a number of ids, with memory
// proportional to that number rather than to the text: the text is encoded in
// chunks cut only where every stage above splits on its own, so the ids are
// exactly the first ones Encode gives. Count and CountEscaped count the ids
// of a whole text the same way.
//
// A Tokenizer is immutable after loading and safe for concurrent use.
package tokenizer
