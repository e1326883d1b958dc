package tokenizer

import "fmt"

// FormatError reports a tokenizer file that is not valid JSON or holds a
// value of the wrong shape. Path is the JSON path of the offending value
// ("model.merges[12]"), Offset the byte offset for JSON syntax errors.
type FormatError struct {
	File   string // file name, or "" for in-memory data
	Path   string // JSON path, e.g. "model.vocab"
	Offset int64  // byte offset of a syntax error, or -1
	Msg    string
}

// Error formats the error as "tokenizer: file: path: offset N: message".
func (e *FormatError) Error() string {
	s := "tokenizer: "
	if e.File != "" {
		s += e.File + ": "
	}
	if e.Path != "" {
		s += e.Path + ": "
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf("offset %d: ", e.Offset)
	}
	return s + e.Msg
}

// UnsupportedError reports a component of tokenizer.json that this package
// does not implement: a model other than BPE, an unknown normalizer or
// pre-tokenizer type, or an option that would change the ids.
type UnsupportedError struct {
	File string // file name, or "" for in-memory data
	Path string // JSON path of the component, e.g. "pre_tokenizer.pretokenizers[0]"
	What string // what is not supported, e.g. `normalizer type "Lowercase"`
}

// Error formats the error as "tokenizer: file: path: unsupported what".
func (e *UnsupportedError) Error() string {
	s := "tokenizer: "
	if e.File != "" {
		s += e.File + ": "
	}
	if e.Path != "" {
		s += e.Path + ": "
	}
	return s + "unsupported " + e.What
}

// IDRangeError reports a token whose id is past the model's embedding table:
// the tokenizer and the model do not belong together, and the first text
// using the token would fail.
type IDRangeError struct {
	Token string // the token, quoted and cut
	ID    int
	Limit int // the model's vocabulary size: ids must be below it
}

// Error names the token, its id and the table's size.
func (e *IDRangeError) Error() string {
	return fmt.Sprintf("tokenizer: token %s has id %d, past the model's %d-entry embedding table", e.Token, e.ID, e.Limit)
}
