package systemone

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Tokenizer is what encoding needs of the base model's tokenizer.
type Tokenizer interface {
	// Encode returns the ids of text with no special tokens added (no BOS); added tokens in the text are matched.
	Encode(text string) []int
	// TokenID returns the id of a token given by its string, such as "<|fim_prefix|>".
	TokenID(token string) (int, bool)
}

// The delimiter tokens: five existing, rarely used Qwen special tokens, found by string in the tokenizer.
const (
	StateToken  = "<|fim_prefix|>" // <state>: starts the state
	QToken      = "<|fim_middle|>" // <q>: starts a question's branch
	OptToken    = "<|box_start|>"  // <opt>: opens an option
	OptEndToken = "<|box_end|>"    // </opt>: closes an option; the pointer reads the hidden state here
	DecideToken = "<|fim_suffix|>" // <decide>: ends a branch; the pointer's query is read here
)

// Serving limits (Kev's 64k-state era).
const (
	MaxStateTokens = 65536                 // state tokens, the <state> token included
	MaxRowTokens   = MaxStateTokens + 8192 // a question row: the state plus one question's branch
	RowPassTokens  = 16384                 // tokens one forward pass takes (RowsPerPass)
)

// Delimiters are the ids of the five delimiter tokens in one tokenizer.
type Delimiters struct {
	State, Q, Opt, OptEnd, Decide int
}

// MissingTokenError says a tokenizer lacks one of the delimiter tokens.
type MissingTokenError struct {
	Token string
}

// Error names the token.
func (e *MissingTokenError) Error() string {
	return "kev: the tokenizer has no token " + strconv.Quote(e.Token)
}

// LookupDelimiters finds the delimiter ids in tok.
func LookupDelimiters(tok Tokenizer) (Delimiters, error) {
	var d Delimiters
	for _, x := range []struct {
		token string
		id    *int
	}{{StateToken, &d.State}, {QToken, &d.Q}, {OptToken, &d.Opt}, {OptEndToken, &d.OptEnd}, {DecideToken, &d.Decide}} {
		id, ok := tok.TokenID(x.token)
		if !ok {
			return Delimiters{}, &MissingTokenError{Token: x.token}
		}
		*x.id = id
	}
	return d, nil
}

var delimiterPattern = regexp.MustCompile(`<\|([A-Za-z0-9_]+)\|>`)

// Escape rewrites every "<|name|>" in caller text (name: ASCII letters, digits, underscores) to "<¦name¦>" (U+00A6
// on both sides), so that no caller text can produce a delimiter or control token: the tokenizer matches added
// tokens inside text. Other added tokens such as "<think>" are left as they are.
func Escape(text string) string {
	if !strings.Contains(text, "<|") {
		return text
	}
	return delimiterPattern.ReplaceAllString(text, "<\u00a6${1}\u00a6>")
}

// UserTokens returns the ids of caller-supplied text: Escape, then the tokenizer with no special tokens added.
func UserTokens(tok Tokenizer, text string) []int {
	return tok.Encode(Escape(text))
}

// LimitTokenizer is a Tokenizer that encodes caller text up to a limit with memory for the limit, not for the
// text (the tokenizer package's does): Encode uses it, when the tokenizer has it, so that a state far over the
// limit costs no more memory than one at the limit.
type LimitTokenizer interface {
	Tokenizer
	// EncodeEscapedLimit returns Encode(Escape(text))[:min(n, max)] for its n ids, and whether n > max.
	EncodeEscapedLimit(text string, max int) (ids []int, truncated bool)
	// CountEscaped returns len(Encode(Escape(text))).
	CountEscaped(text string) int
}

// userTokensLimit returns UserTokens(tok, text) cut to its first max ids, and the uncut count n. With a
// LimitTokenizer, no more than limit ids (and one chunk) are ever held, and a text over the limit is only counted.
func userTokensLimit(tok Tokenizer, text string, limit int) (ids []int, n int) {
	if lt, ok := tok.(LimitTokenizer); ok {
		ids, over := lt.EncodeEscapedLimit(text, limit)
		if !over {
			return ids, len(ids)
		}
		return ids, lt.CountEscaped(text)
	}
	ids = UserTokens(tok, text)
	n = len(ids)
	if n > limit {
		ids = ids[:limit:limit]
	}
	return ids, n
}

// EncodeOptions set the limits Encode applies. The zero value is Kev's serving admission: strict, with the
// 65,536-token state and 73,728-token row limits.
type EncodeOptions struct {
	// Truncate reads the first MaxState tokens of a longer state (the <state> token included) instead of refusing
	// it; the encoding then says so. Kev's KEV_TRUNCATE_STATES=1.
	Truncate bool
	MaxState int // 0: MaxStateTokens
	MaxRow   int // 0: MaxRowTokens
	// MaxInput bounds the packed encoding's tokens, all questions together (0: DefaultMaxInputTokens, < 0: none):
	// the encoding takes 24 bytes a token, so a request of many questions each within the row limit is refused
	// with a *RequestTooLongError before it holds more.
	MaxInput int
}

// DefaultMaxInputTokens bounds a request's packed tokens (EncodeOptions.MaxInput): 4,194,304, the HTTP server's
// default bound on the tokens of all requests in flight (64 states at the limit). Kev has no such bound.
const DefaultMaxInputTokens = 64 * MaxStateTokens

// RequestTooLongError refuses a request whose packed encoding would pass EncodeOptions.MaxInput tokens.
type RequestTooLongError struct {
	Question int // the question whose branch passed the bound
	Limit    int
}

// Error says where the bound was passed and what to do.
func (e *RequestTooLongError) Error() string {
	return fmt.Sprintf("the request is more than %s tokens by question %d, over this server's limit: split its questions across requests",
		commaInt(e.Limit), e.Question)
}

// Detail returns the 422 detail: Error.
func (e *RequestTooLongError) Detail() string { return e.Error() }

// StateTooLongError refuses a state over the limit (strict mode).
type StateTooLongError struct {
	Tokens int // the state's tokens, <state> included; 0 when only Bytes is known
	Limit  int
	// Bytes, when not 0, says the state's text passed this many bytes (Record.StateCut): it was not rendered or
	// counted further, so Tokens is unknown, but over Limit.
	Bytes int
}

// Error returns Kev's message, numbers with thousands separators. A state cut at its render budget is said to be
// longer than the budget's bytes instead (Kev, which renders it whole, would give its count).
func (e *StateTooLongError) Error() string {
	if e.Bytes > 0 {
		return fmt.Sprintf("state renders to more than %s bytes, over the %s-token limit (the <state> token included): shorten the document or split it across requests",
			commaInt(e.Bytes), commaInt(e.Limit))
	}
	return fmt.Sprintf("state is %s tokens, over the %s-token limit (the <state> token included): shorten the document or split it across requests",
		commaInt(e.Tokens), commaInt(e.Limit))
}

// Detail returns the 422 detail of Kev's server: Error plus the hint about truncate mode.
func (e *StateTooLongError) Detail() string {
	return e.Error() + "; or start the server with KEV_TRUNCATE_STATES=1 to read only its first " + commaInt(e.Limit) +
		" tokens (responses then say truncated: true)"
}

// RowTooLongError refuses a question whose row (the state read plus its branch) is over the row limit.
type RowTooLongError struct {
	Question int    // index in the request
	ID       string // the question's id
	Tokens   int    // the branch's tokens: <q> ... <decide>; 0 when only Bytes is known
	StateLen int    // the state tokens read, <state> included
	Limit    int    // the row limit
	Bytes    int    // when not 0: the question's texts passed this many bytes (RecordQuestion.Cut), over the limit
}

// Error returns Kev's message (no thousands separators here); for a question cut at its render budget, the
// budget's bytes instead of its count.
func (e *RowTooLongError) Error() string {
	if e.Bytes > 0 {
		return fmt.Sprintf("branch too long: more than %d bytes of text with a %d-token state (row limit %d)", e.Bytes, e.StateLen, e.Limit)
	}
	return fmt.Sprintf("branch too long: %d tokens with a %d-token state (row limit %d)", e.Tokens, e.StateLen, e.Limit)
}

// Detail returns the 422 detail of Kev's server, which is Error.
func (e *RowTooLongError) Detail() string { return e.Error() }

// AdmissionDetail returns the {"detail": ...} text of the 422 Kev's server sends for an encoding error, and false
// for errors that are not admission errors.
func AdmissionDetail(err error) (string, bool) {
	var se *StateTooLongError
	var re *RowTooLongError
	var qe *TooManyQuestionsError
	var rte *RenderTooLargeError
	var ie *QuestionIDTooLongError
	var rqe *RequestTooLongError
	switch {
	case errors.As(err, &rqe):
		return rqe.Detail(), true
	case errors.As(err, &ie):
		return ie.Detail(), true
	case errors.As(err, &rte):
		return rte.Detail(), true
	case errors.As(err, &se):
		return se.Detail(), true
	case errors.As(err, &re):
		return re.Detail(), true
	case errors.As(err, &qe):
		return qe.Detail(), true
	}
	return "", false
}

// Encoding is a record packed into token ids: the state, then each question's branch
//
//	<state> U(state)   <q> U(instr) (<opt> U(option) </opt>)* <decide>   ...one branch per question
//
// where U is UserTokens. Segment 0 is the state and segment k question k; positions count on from the state in
// every branch (each branch restarts at StateLen), so a branch reads as the continuation of the state alone.
type Encoding struct {
	IDs []int
	Seg []int
	Pos []int

	Decide []int   // per question: the index of its <decide> token (the last of its branch)
	Opts   [][]int // per question, per option: the index of the </opt> closing it

	StateLen    int  // tokens of the state read, <state> included (segment 0)
	StateTokens int  // the state's full token count, <state> included
	Truncated   bool // StateTokens > StateLen
}

// Encode packs a record (Kev's encode with the serving admission): the state is refused with a
// *StateTooLongError when over the limit, or cut to it in truncate mode; a question whose branch does not fit the
// row limit beside the state is refused with a *RowTooLongError. A tokenizer lacking a delimiter gives a
// *MissingTokenError.
func Encode(tok Tokenizer, rec *Record, opts EncodeOptions) (*Encoding, error) {
	maxState, maxRow := opts.MaxState, opts.MaxRow
	if maxState <= 0 {
		maxState = MaxStateTokens
	}
	if maxRow <= 0 {
		maxRow = MaxRowTokens
	}
	maxInput := opts.MaxInput
	if maxInput == 0 {
		maxInput = DefaultMaxInputTokens
	}
	d, err := LookupDelimiters(tok)
	if err != nil {
		return nil, err
	}
	if rec.StateCut && !opts.Truncate {
		return nil, &StateTooLongError{Limit: maxState, Bytes: rec.StateBytes}
	}
	state, full := rec.shared.stateTokens(tok, rec.State, maxState-1)
	n := full + 1 // with StateCut, the tokens of the text rendered: fewer than the whole state's
	if n > maxState && !opts.Truncate {
		return nil, &StateTooLongError{Tokens: n, Limit: maxState}
	}
	ls := len(state) + 1
	e := &Encoding{StateLen: ls, StateTokens: n, Truncated: n > maxState || rec.StateCut}
	e.IDs = append(append(make([]int, 0, ls), d.State), state...)
	e.Seg = make([]int, ls)
	e.Pos = make([]int, ls)
	for i := range e.Pos {
		e.Pos[i] = i
	}
	for k, q := range rec.Questions {
		if q.Cut {
			return nil, &RowTooLongError{Question: k, ID: q.ID, StateLen: ls, Limit: maxRow, Bytes: q.CutBytes}
		}
		// The branch is encoded only up to the room the row leaves beside the state; past it, its pieces are only
		// counted, for the message.
		room := maxRow - ls
		full := 1
		piece := func(text string) []int {
			ids, n := userTokensLimit(tok, text, max(0, room-full))
			full += n
			return ids
		}
		br := append([]int{d.Q}, piece(q.Instr)...)
		ends := make([]int, 0, len(q.Options))
		for _, o := range q.Options {
			br = append(br, d.Opt)
			full++
			br = append(br, piece(o)...)
			br = append(br, d.OptEnd)
			full++
			ends = append(ends, len(br)-1)
		}
		br = append(br, d.Decide)
		full++
		if full > room {
			return nil, &RowTooLongError{Question: k, ID: q.ID, Tokens: full, StateLen: ls, Limit: maxRow}
		}
		if maxInput > 0 && len(e.IDs)+len(br) > maxInput {
			return nil, &RequestTooLongError{Question: k, Limit: maxInput}
		}
		base := len(e.IDs)
		e.IDs = append(e.IDs, br...)
		for i := range br {
			e.Seg = append(e.Seg, k+1)
			e.Pos = append(e.Pos, ls+i)
		}
		for j := range ends {
			ends[j] += base
		}
		e.Decide = append(e.Decide, base+len(br)-1)
		e.Opts = append(e.Opts, ends)
	}
	return e, nil
}

// InputTokens returns the usage's input_tokens: every token of the packed encoding.
func (e *Encoding) InputTokens() int { return len(e.IDs) }

// StateIDs returns the state row: <state> and the state tokens read.
func (e *Encoding) StateIDs() []int { return e.IDs[:e.StateLen] }

// Row is one question's branch as its own causal row after the state: its ids and positions, and the offsets of
// its <decide> and </opt> tokens within the branch (add StateLen for offsets within state + branch).
type Row struct {
	IDs    []int
	Pos    []int
	Decide int
	Opts   []int
}

// Rows splits the encoding into its question rows. Running StateIDs followed by a row as one causal sequence
// reads exactly what that question may attend to in the packed form, at the same positions.
func (e *Encoding) Rows() []Row {
	rows := make([]Row, len(e.Decide))
	start := e.StateLen
	for k, dec := range e.Decide {
		end := dec + 1
		opts := make([]int, len(e.Opts[k]))
		for j, o := range e.Opts[k] {
			opts[j] = o - start
		}
		rows[k] = Row{IDs: e.IDs[start:end], Pos: e.Pos[start:end], Decide: dec - start, Opts: opts}
		start = end
	}
	return rows
}

// RowsPerPass returns how many question rows one forward pass takes: as many as fit RowPassTokens counting the
// cached state each row carries, at least one.
func (e *Encoding) RowsPerPass() int {
	longest := 0
	for _, r := range e.Rows() {
		longest = max(longest, len(r.IDs))
	}
	return RowsPerPass(e.StateLen, longest)
}

// RowsPerPass returns max(1, RowPassTokens / (prefixLen + longestRow)): the rows of one pass, each carrying a copy
// of a prefixLen-token state, with the longest row's tokens. Memory per pass is then bounded by one maximal row
// however many questions a request has; rows are independent, so answers do not depend on the split.
func RowsPerPass(prefixLen, longestRow int) int {
	per := prefixLen + longestRow
	if per < 1 {
		return RowPassTokens
	}
	return max(1, RowPassTokens/per)
}

// commaInt formats n with comma thousands separators, as Python's format(n, ",").
func commaInt(n int) string {
	s := strconv.Itoa(n)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
