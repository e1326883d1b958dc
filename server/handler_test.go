package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/bridge"
	"github.com/kevgo/kev/internal/loadtest"
	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// byteTokenizer counts one token per byte: enough to give usage figures a fake model can be checked by.
type byteTokenizer struct{}

func (byteTokenizer) Encode(text string) []int {
	ids := make([]int, len(text))
	for i := range text {
		ids[i] = int(text[i])
	}
	return ids
}

func (byteTokenizer) TokenID(string) (int, bool) { return 0, false }

// fakeModel answers like a Predictor without a network: each option's weight comes from a hash of the state and
// the option's text (so answers do not depend on option order), or from fixed, or from the option's position
// (positional). It blocks in Do while block is open, after signalling started.
type fakeModel struct {
	latency    float64
	truncate   bool
	fixed      map[string]float64 // option text → weight
	positional []float64          // weight by position, overrides the rest
	maxState   int                // state bytes past this are refused (admission); 0: no limit
	err        error
	panics     bool

	started    chan struct{}
	block      chan struct{}
	blockLarge int // with block: only states of this many bytes or more block
	calls      atomic.Int64
	card       systemone.ModelCard
}

func (f *fakeModel) Card() systemone.ModelCard { return f.card }

func (f *fakeModel) Tokenizer() systemone.Tokenizer { return byteTokenizer{} }

func (f *fakeModel) Do(ctx context.Context, req *systemone.Request) (*systemone.Response, error) {
	f.calls.Add(1)
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
	if err != nil {
		return nil, err
	}
	if f.maxState > 0 && len(rec.State)+1 > f.maxState {
		return nil, &systemone.StateTooLongError{Tokens: len(rec.State) + 1, Limit: f.maxState}
	}
	release, err := systemone.AdmitTokens(ctx, len(rec.State)+1) // as the predictor does, state bytes as tokens
	if err != nil {
		return nil, err
	}
	defer release()
	if f.err != nil {
		return nil, f.err
	}
	if f.panics {
		panic("fake model failure")
	}
	blocks := f.block != nil && len(rec.State) >= f.blockLarge
	if f.started != nil && (blocks || f.block == nil) {
		f.started <- struct{}{}
	}
	if blocks {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	probs := make([][]float32, len(rec.Questions))
	input := len(rec.State) + 1
	for k, q := range rec.Questions {
		w := make([]float64, len(q.Options))
		sum := 0.0
		for j, o := range q.Options {
			switch {
			case f.positional != nil:
				w[j] = f.positional[j]
			case f.fixed != nil:
				w[j] = f.fixed[o]
				if w[j] == 0 {
					w[j] = 1
				}
			default:
				h := fnv.New64a()
				io.WriteString(h, rec.State+"\x00"+q.Instr+"\x00"+o)
				w[j] = math.Exp(float64(h.Sum64()%1000) / 250)
			}
			sum += w[j]
			input += len(o) + 2
		}
		probs[k] = make([]float32, len(w))
		for j := range w {
			probs[k][j] = float32(w[j] / sum)
		}
		input += len(q.Instr) + 2
	}
	answers, err := systemone.ToAnswers(rec, probs)
	if err != nil {
		return nil, err
	}
	resp := &systemone.Response{Model: req.ModelName(), Answers: answers, LatencyMS: f.latency,
		Usage: systemone.Usage{InputTokens: input, OutputTokens: systemone.OutputTokens(byteTokenizer{}, answers)}}
	if f.truncate {
		cut := len(rec.State) > 20
		resp.Truncated = &cut
		resp.Usage.StateTokens, resp.Usage.StateTokensUsed = len(rec.State)+1, min(len(rec.State)+1, 21)
	}
	return resp, nil
}

var testCard = systemone.ModelCard{
	Run: "jaredpalmer/kev-4b", Base: "Qwen/Qwen3.5-4B-Base", ReleaseDate: "2026-10-01", LoRA: 16,
	Device: "cpu", Backend: "go", DType: "float32", Temperature: 2.41, MaxStateTokens: systemone.MaxStateTokens,
	PrefixCache: systemone.PrefixCacheCounts{Size: 4, MaxTokens: 65536, Hits: 3, Misses: 5, CachedStates: 2},
	Batches:     systemone.BatchCounts{Count: 7, Requests: 9, Queued: 1},
}

// single returns req with only question q.
func single(req *systemone.Request, q systemone.QuestionEntry) *systemone.Request {
	return &systemone.Request{Model: req.Model, State: req.State, Questions: []systemone.QuestionEntry{q}}
}

// parse reads JSON text with Python's rules.
func parse(t *testing.T, s string) pyjson.Value {
	t.Helper()
	v, err := pyjson.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serve starts a loopback server for m.
func serve(t *testing.T, m model, opts Options) (*httptest.Server, *Handler) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	h := newHandler(m, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h
}

type reply struct {
	status int
	header http.Header
	body   string
	close  bool // the server closes the connection after this response
}

// call sends one request; headers come as name, value pairs.
func httpCall(t *testing.T, c *http.Client, method, url, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b), resp.Close}
}

func post(t *testing.T, url, body string, hdr ...string) reply {
	t.Helper()
	return httpCall(t, nil, http.MethodPost, url, body, hdr...)
}

var (
	requestIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)
	timingPattern    = regexp.MustCompile(`^app;dur=[0-9]+\.[0-9]$`)
)

// checkCommon checks what every response carries.
func checkCommon(t *testing.T, r reply) {
	t.Helper()
	if id := r.header.Get(requestIDHeader); id == "" {
		t.Errorf("no request id")
	}
	if st := r.header.Get(serverTimingHeader); !timingPattern.MatchString(st) {
		t.Errorf("server-timing %q", st)
	}
}

func TestSystemOneChoiceExactBody(t *testing.T) {
	m := &fakeModel{latency: 12.3, fixed: map[string]float64{"a": 3, "b": 1}}
	srv, _ := serve(t, m, Options{})
	r := post(t, srv.URL+"/v1/systemone",
		`{"state":"s","model":"m","questions":{"q":{"type":"choice","instructions":"Pick","criteria":{"a":null,"b":null}}}}`)
	checkCommon(t, r)
	// input: state 1+1, options 2×(1+2), instruction 4+2.
	want := `{"model":"m","answers":{"q":{"type":"choice","choice":"a","confidence":0.5,"probabilities":{"a":0.75,"b":0.25}}},"usage":{"input_tokens":14,"output_tokens":100},"latency_ms":12.3}`
	if r.status != 200 || r.body != want {
		t.Fatalf("%d %s\nwant %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	if !requestIDPattern.MatchString(r.header.Get(requestIDHeader)) {
		t.Errorf("request id %q is not 32 hex digits", r.header.Get(requestIDHeader))
	}
}

// TestSystemOneMatchesModel checks the body is the model's response, byte for byte, for the spec's request shapes.
func TestSystemOneMatchesModel(t *testing.T) {
	m := &fakeModel{latency: 3.1}
	srv, _ := serve(t, m, Options{})
	for _, body := range []string{
		conformanceChoice, conformanceNullDescriptions, conformanceStructured, conformanceObjectState,
		`{"state":"I was charged twice.","model":"jev-latest","questions":{"billing":{"type":"noul","criteria":{"true":"About charges","false":"Not about charges"}},"urgency":{"type":"score","instructions":"How urgent is this?","criteria":["today"]}}}`,
		`{"state":"鞋子晚了两周才送到","questions":{"部门":{"type":"choice","criteria":{"退货":"退换","账单":null}}}}`,
	} {
		req, err := systemone.DecodeRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := m.Do(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := resp.MarshalJSON()
		r := post(t, srv.URL+"/v1/systemone", body)
		checkCommon(t, r)
		if r.status != 200 || r.body != string(want) {
			t.Errorf("%d %s\nwant %s", r.status, r.body, want)
		}
	}
}

// Kev's HTTP conformance requests: each endpoint's answers and errors as Kev's server gives them.
const (
	department                  = `{"returns":"Exchanges, refunds, wrong or damaged items","shipping":"Delivery status, delays, lost packages","billing":"Charges, invoices, payment problems"}`
	conformanceChoice           = `{"state":"My running shoes arrived in the wrong size. Can I swap them for a size 10?","model":"jev-latest","questions":{"department":{"type":"choice","instructions":"Which team should handle this?","criteria":` + department + `}}}`
	conformanceNullDescriptions = `{"state":"This is the third time I've asked. Fix it now.","model":"jev-latest","questions":{"tone":{"type":"choice","instructions":"What is the customer's tone?","criteria":{"calm":null,"frustrated":null,"angry":null}}}}`
	conformanceStructured       = `{"state":"I want my money back for the jacket, it ripped.","model":"jev-latest","questions":{"topic":{"type":"choice","instructions":{"question":"Which returns topic is the customer asking about?","focus":"Classify the information the customer wants."},"criteria":{"refund":{"what":"Money back","not_for":"Exchanges","examples":["refund please","give me my money"]},"exchange":{"what":"A different item","not_for":"Refunds","examples":["swap for a size 10"]}}}}}`
	conformanceObjectState      = `{"state":{"document":"I was charged twice. Please fix this ASAP."},"model":"jev-latest","questions":{"billing":{"type":"noul","instructions":"Is this about billing?","criteria":{"true":"Explicitly about charges","false":"Not about charges"}},"urgency":{"type":"score","instructions":"How urgent is this?","criteria":["can wait","this week","today"]}}}`
	conformancePackedA          = `"a":{"type":"noul","instructions":"Is the weather described as nice?"}`
	conformancePackedB          = `"b":{"type":"choice","instructions":"Which season is it most likely?","criteria":{"summer":null,"winter":null,"unknown":null}}`
	conformancePackedState      = `"The weather is nice today and the park is full of people."`
)

// conformanceChecks asserts §7.11's expectations on the answers of the conformance requests.
func conformanceChecks(t *testing.T, url string, hdr ...string) {
	t.Helper()
	type answer struct {
		Type          string             `json:"type"`
		Choice        string             `json:"choice"`
		Noul          *float64           `json:"noul"`
		Score         float64            `json:"score"`
		Confidence    float64            `json:"confidence"`
		Probabilities map[string]float64 `json:"probabilities"`
		Legend        map[string]string  `json:"legend"`
	}
	type response struct {
		Model   string            `json:"model"`
		Answers map[string]answer `json:"answers"`
		Usage   map[string]int    `json:"usage"`
	}
	get := func(body string) (response, reply) {
		r := post(t, url+"/v1/systemone", body, hdr...)
		checkCommon(t, r)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var resp response
		if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Usage["input_tokens"] <= 0 || resp.Usage["output_tokens"] <= 0 {
			t.Errorf("usage %v", resp.Usage)
		}
		return resp, r
	}
	checkChoice := func(a answer, keys ...string) {
		t.Helper()
		if !slices.Contains(keys, a.Choice) {
			t.Errorf("choice %q not in %v", a.Choice, keys)
		}
		sum, best := 0.0, ""
		for _, k := range keys {
			p, ok := a.Probabilities[k]
			if !ok {
				t.Errorf("no probability for %q", k)
			}
			sum += p
			if best == "" || p > a.Probabilities[best] {
				best = k
			}
		}
		if len(a.Probabilities) != len(keys) || math.Abs(sum-1) > 0.03 {
			t.Errorf("probabilities %v", a.Probabilities)
		}
		if a.Probabilities[a.Choice] != a.Probabilities[best] {
			t.Errorf("choice %q is not the argmax of %v", a.Choice, a.Probabilities)
		}
		if a.Confidence < 0 || a.Confidence > 1 {
			t.Errorf("confidence %v", a.Confidence)
		}
	}

	resp, _ := get(conformanceChoice)
	if resp.Model != "jev-latest" {
		t.Errorf("model %q", resp.Model)
	}
	checkChoice(resp.Answers["department"], "returns", "shipping", "billing")

	resp, _ = get(conformanceNullDescriptions)
	checkChoice(resp.Answers["tone"], "calm", "frustrated", "angry")

	resp, _ = get(conformanceStructured)
	checkChoice(resp.Answers["topic"], "refund", "exchange")

	resp, r := get(conformanceObjectState)
	var raw struct {
		Answers map[string]json.RawMessage `json:"answers"`
	}
	json.Unmarshal([]byte(r.body), &raw)
	if !regexp.MustCompile(`^\{"type":"noul","noul":[0-9.e-]+\}$`).Match(raw.Answers["billing"]) {
		t.Errorf("noul answer %s", raw.Answers["billing"])
	}
	if n := resp.Answers["billing"].Noul; n == nil || *n < 0 || *n > 1 {
		t.Errorf("noul %v", n)
	}
	u := resp.Answers["urgency"]
	if fmt.Sprint(u.Legend) != "map[0:can wait 1:this week 2:today]" || len(u.Probabilities) != 3 {
		t.Errorf("score answer %+v", u)
	}
	exp := 0.0
	for k, p := range u.Probabilities {
		exp += float64(k[0]-'0') * p
	}
	if math.Abs(u.Score-exp) > 0.05 {
		t.Errorf("score %v, Σ k·p_k %v", u.Score, exp)
	}

	// Packed equals separate: b asked with a, and alone.
	both, _ := get(`{"state":` + conformancePackedState + `,"questions":{` + conformancePackedA + `,` + conformancePackedB + `}}`)
	alone, _ := get(`{"state":` + conformancePackedState + `,"questions":{` + conformancePackedB + `}}`)
	for k, p := range both.Answers["b"].Probabilities {
		if math.Abs(p-alone.Answers["b"].Probabilities[k]) > 0.011 {
			t.Errorf("b[%s]: %v packed, %v alone", k, p, alone.Answers["b"].Probabilities[k])
		}
	}
	if len(both.Answers["b"].Probabilities) != 3 {
		t.Errorf("b %v", both.Answers["b"])
	}
}

func TestConformanceFake(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	conformanceChecks(t, srv.URL)
}

func TestAcceptedNoInstructionsAndOneLevelScore(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	r := post(t, srv.URL+"/v1/systemone", `{"state":"I was charged twice.","model":"jev-latest","questions":{"billing":{"type":"noul","criteria":{"true":"About charges","false":"Not about charges"}},"urgency":{"type":"score","instructions":"How urgent is this?","criteria":["today"]}}}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := `"urgency":{"type":"score","score":0.0,"legend":{"0":"today"},"probabilities":{"0":1.0},"confidence":1.0}`
	if !strings.Contains(r.body, want) {
		t.Fatalf("%s\nwant it to contain %s", r.body, want)
	}
}

// TestValidation422 sends every body of internal/systemone/testdata/validation.json (pydantic's verdicts) over HTTP.
func TestValidation422(t *testing.T) {
	b, err := os.ReadFile("../internal/systemone/testdata/validation.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Body   json.RawMessage `json:"body"`
			OK     bool            `json:"ok"`
			Detail json.RawMessage `json:"detail"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	for _, c := range file.Cases {
		r := post(t, srv.URL+"/v1/systemone", string(c.Body))
		checkCommon(t, r)
		if c.OK {
			if r.status != 200 {
				t.Errorf("%.100s: %d %.300s", c.Body, r.status, r.body)
			}
			continue
		}
		if r.status != 422 {
			t.Errorf("%.100s: %d, want 422", c.Body, r.status)
			continue
		}
		got, err := pyjson.Parse([]byte(r.body))
		if err != nil {
			t.Fatal(err)
		}
		want := pyjson.Object(pyjson.M("detail", parse(t, string(c.Detail))))
		if string(c.Body) == "null" {
			want = parse(t, `{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}`)
		}
		if !pyjson.Equal(got, want) {
			t.Errorf("%.100s:\n got %.400s\nwant %.400s", c.Body, r.body, pyjson.Dumps(want))
		}
	}
}

func TestSpecRejections(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	opts := make([]string, 256)
	for i := range opts {
		opts[i] = fmt.Sprintf(`"o%d":null`, i)
	}
	for _, qs := range []string{
		`{"q":{"type":"score","instructions":"i","criteria":[]}}`,
		`{"q":{"type":"bogus","instructions":"i"}}`,
		`{"q":{"type":"choice","instructions":"i","criteria":{` + strings.Join(opts, ",") + `}}}`,
		`{}`,
	} {
		for _, path := range []string{"/v1/systemone", "/v1/systemone/separate"} {
			r := post(t, srv.URL+path, `{"state":"x","model":"m","questions":`+qs+`}`)
			if r.status != 422 || !strings.HasPrefix(r.body, `{"detail":[{"type":`) {
				t.Errorf("%s %.60s: %d %.200s", path, qs, r.status, r.body)
			}
		}
	}
}

func TestBodyErrors(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{MaxBodyBytes: 1000})
	url := srv.URL + "/v1/systemone"
	cases := []struct {
		name, body, ctype string
		status            int
		want              string
	}{
		{"malformed", `{"state": "x", "questions": {"q": {"type": "noul",}}}`, "application/json", 422,
			`{"detail":[{"type":"json_invalid","loc":["body",50],"msg":"JSON decode error","input":{},"ctx":{"error":"Expecting property name enclosed in double quotes"}}]}`},
		{"not utf-8", "{\"state\": \"\xff\", \"questions\": {}}", "application/json", 400,
			`{"detail":"There was an error parsing the body"}`},
		{"empty", "", "application/json", 422, `{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}`},
		{"null", "null", "application/json", 422, `{"detail":[{"type":"missing","loc":["body"],"msg":"Field required","input":null}]}`},
		{"text body", `{"state":"x"}`, "text/plain", 422,
			`{"detail":[{"type":"model_type","loc":["body"],"msg":"Input should be a valid dictionary or instance of SystemOneRequest","input":"{\"state\":\"x\"}","ctx":{"class_name":"SystemOneRequest"}}]}`},
		{"json suffix type", `[1]`, "application/vnd.api+json; charset=utf-8", 422,
			`{"detail":[{"type":"model_type","loc":["body"],"msg":"Input should be a valid dictionary or instance of SystemOneRequest","input":[1],"ctx":{"class_name":"SystemOneRequest"}}]}`},
		{"oversized", `{"state":"` + strings.Repeat("x", 2000) + `"}`, "application/json", 413,
			`{"detail":"request body is over the 1000-byte limit"}`},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || string(b) != c.want {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, resp.StatusCode, b, c.status, c.want)
		}
		if resp.Header.Get(requestIDHeader) == "" {
			t.Errorf("%s: no request id", c.name)
		}
	}
	// A body without a length, over the limit: the reader stops it.
	pr, pw := io.Pipe()
	go func() {
		for range 100 {
			if _, err := pw.Write([]byte(strings.Repeat(" ", 100))); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked oversized: %d %s", resp.StatusCode, b)
	}
}

func TestAdmissionAndServerErrors(t *testing.T) {
	m := &fakeModel{latency: 1, maxState: 10}
	srv, _ := serve(t, m, Options{})
	r := post(t, srv.URL+"/v1/systemone", `{"state":"a state that is too long","questions":{"q":{"type":"noul"}}}`)
	want := `{"detail":"state is 25 tokens, over the 10-token limit (the <state> token included): shorten the document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only its first 10 tokens (responses then say truncated: true)"}`
	if r.status != 422 || r.body != want {
		t.Errorf("admission: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/systemone/separate", "/v1/systemone/permute"} {
		body := `{"state":"a state that is too long","questions":{"q":{"type":"choice","criteria":{"a":null}}}}`
		if strings.HasSuffix(path, "permute") {
			body = `{"request":` + body + `,"question":"q"}`
		}
		if r := post(t, srv.URL+path, body); r.status != 422 || r.body != want {
			t.Errorf("%s admission: %d %s", path, r.status, r.body)
		}
	}

	m2 := &fakeModel{err: errors.New("device lost")}
	srv2, _ := serve(t, m2, Options{})
	r = post(t, srv2.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`)
	if r.status != 500 || r.body != "Internal Server Error" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("error: %d %q %q", r.status, r.body, r.header.Get("Content-Type"))
	}
	checkCommon(t, r)

	srv3, _ := serve(t, &fakeModel{panics: true}, Options{})
	for _, c := range []struct{ path, body string }{
		{"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`},
		{"/v1/systemone/separate", `{"state":"s","questions":{"q":{"type":"noul"},"r":{"type":"noul"}}}`},
		{"/v1/systemone/permute", `{"request":` + permuteRequest + `,"question":"q"}`},
	} {
		r = post(t, srv3.URL+c.path, c.body)
		if r.status != 500 || r.body != "Internal Server Error" {
			t.Errorf("%s panic: %d %q", c.path, r.status, r.body)
		}
	}
}

func TestModelsCard(t *testing.T) {
	m := &fakeModel{card: testCard}
	srv, _ := serve(t, m, Options{})
	r := httpCall(t, nil, http.MethodGet, srv.URL+"/v1/models", "")
	checkCommon(t, r)
	card := `"description":"Kev pointer head on Qwen/Qwen3.5-4B-Base, serving jaredpalmer/kev-4b at temperature 2.41",` +
		`"release_date":"2026-10-01","run":"jaredpalmer/kev-4b","base":"Qwen/Qwen3.5-4B-Base","lora":16,"device":"cpu",` +
		`"backend":"go","dtype":"float32","temperature":2.41,"max_state_tokens":65536,"truncate_states":false,` +
		`"cuda_graphs":null,"prefix_cache":{"size":4,"min_state_tokens":0,"max_tokens":65536,"hits":3,"misses":5,` +
		`"cached_states":2,"oom_retries":0},"batches":{"count":7,"requests":9,"queued":1}}`
	want := `{"models":[{"name":"kev-latest",` + card + `,{"name":"jev-latest",` + card + `]}`
	if r.status != 200 || r.body != want {
		t.Fatalf("%d %s\nwant %s", r.status, r.body, want)
	}

	c := testCard
	c.Temperature = 2.405 // .2f rounds the binary value: 2.40
	c.CUDAGraphs = &systemone.GraphCounts{Captured: 5, Kept: 4, Pending: 1, Failed: 0, Replays: 40, Eager: 3}
	c.TruncateStates = true
	m.card = c
	r = httpCall(t, nil, http.MethodGet, srv.URL+"/v1/models", "")
	for _, s := range []string{`at temperature 2.40"`, `"temperature":2.405,`, `"truncate_states":true,`,
		`"cuda_graphs":{"captured":5,"kept":4,"pending":1,"failed":0},`} {
		if !strings.Contains(r.body, s) {
			t.Errorf("card lacks %s: %s", s, r.body)
		}
	}
	r = httpCall(t, nil, http.MethodHead, srv.URL+"/v1/models", "")
	if r.status != 200 || r.body != "" {
		t.Errorf("HEAD: %d %q", r.status, r.body)
	}
}

func TestRoutingDefaults(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		method, path string
		status       int
		body, allow  string
	}{
		{"GET", "/nope", 404, `{"detail":"Not Found"}`, ""},
		{"GET", "/v1/nope", 404, `{"detail":"Not Found"}`, ""},
		{"POST", "/v1/models", 405, `{"detail":"Method Not Allowed"}`, "GET, HEAD"},
		{"GET", "/v1/systemone", 405, `{"detail":"Method Not Allowed"}`, "POST"},
		{"PUT", "/v1/systemone/permute", 405, `{"detail":"Method Not Allowed"}`, "POST"},
		{"DELETE", "/v1/systemone/separate", 405, `{"detail":"Method Not Allowed"}`, "POST"},
		{"OPTIONS", "/v1/systemone", 405, `{"detail":"Method Not Allowed"}`, "POST"}, // not a preflight: no Origin
		{"GET", "/openapi.json/", 307, "", ""},
	}
	for _, c := range cases {
		r := httpCall(t, noRedirect, c.method, srv.URL+c.path, "")
		checkCommon(t, r)
		if r.status != c.status || r.body != c.body || r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %q allow %q", c.method, c.path, r.status, r.body, r.header.Get("Allow"))
		}
		if c.status == 307 && r.header.Get("Location") != "/openapi.json" { // relative: the Host header is not echoed
			t.Errorf("redirect to %q", r.header.Get("Location"))
		}
	}
	r := httpCall(t, nil, "GET", srv.URL+"/openapi.json", "")
	var doc map[string]any
	if r.status != 200 || json.Unmarshal([]byte(r.body), &doc) != nil || doc["openapi"] != "3.1.0" {
		t.Errorf("openapi: %d %.100s", r.status, r.body)
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/v1/systemone", "/v1/systemone/permute", "/v1/systemone/separate", "/v1/models"} {
		if paths[p] == nil {
			t.Errorf("openapi lacks %s", p)
		}
	}
}

func TestAuth(t *testing.T) {
	m := &fakeModel{latency: 1, card: testCard}
	srv, _ := serve(t, m, Options{APIKey: "secret"})
	const unauthorized = `{"detail":"missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>"}`
	body := `{"state":"s","questions":{"q":{"type":"noul"}}}`
	cases := []struct {
		method, path, authz string
		status              int
	}{
		{"GET", "/v1/models", "", 401},
		{"GET", "/v1/models", "Bearer wrong", 401},
		{"GET", "/v1/models", "bearer secret", 200}, // any case of the scheme (TestHardeningBearerSchemeCase)
		{"GET", "/v1/models", "Bearer  secret", 401},
		{"GET", "/v1/models", "Bearer secre", 401},
		{"GET", "/v1/models", "Bearer secret", 200},
		{"POST", "/v1/systemone", "", 401},
		{"POST", "/v1/systemone", "Bearer secret", 200},
		{"GET", "/v1/unknown", "", 401},
		{"GET", "/v1/unknown", "Bearer secret", 404},
		{"GET", "/v1", "", 401},
		{"GET", "/v1beta", "", 401}, // the gate covers every path that starts with /v1
		{"GET", "/openapi.json", "", 200},
		{"GET", "/metrics", "", 200},
		{"GET", "/other", "", 404},
	}
	for _, c := range cases {
		b := ""
		if c.method == "POST" {
			b = body
		}
		r := httpCall(t, nil, c.method, srv.URL+c.path, b, "Authorization", c.authz)
		checkCommon(t, r)
		if r.status != c.status {
			t.Errorf("%s %s %q: %d %s", c.method, c.path, c.authz, r.status, r.body)
		}
		if c.status == 401 && (r.body != unauthorized || r.header.Get("Www-Authenticate") != "Bearer") {
			t.Errorf("%s %s: 401 body %s, www-authenticate %q", c.method, c.path, r.body, r.header.Get("Www-Authenticate"))
		}
	}
	if n := m.calls.Load(); n != 1 {
		t.Errorf("the model ran %d times, want 1 (only the authorized request)", n)
	}

	open, _ := serve(t, m, Options{})
	if r := httpCall(t, nil, "GET", open.URL+"/v1/models", "", "Authorization", "Bearer anything"); r.status != 200 {
		t.Errorf("open server: %d", r.status)
	}
	if r := httpCall(t, nil, "GET", open.URL+"/openapi.json", ""); r.header.Get(requestIDHeader) == "" {
		t.Error("openapi.json has no request id")
	}
}

func TestRequestID(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{APIKey: "k"})
	seen := map[string]bool{}
	for range 20 {
		r := httpCall(t, nil, "GET", srv.URL+"/v1/models", "")
		id := r.header.Get(requestIDHeader)
		if !requestIDPattern.MatchString(id) || id[12] != '4' || !strings.ContainsRune("89ab", rune(id[16])) || seen[id] {
			t.Fatalf("request id %q is not a fresh UUID4", id)
		}
		seen[id] = true
	}
	for _, id := range []string{"abc", "client-id-123", "Ünïcode ok?"} {
		for _, path := range []string{"/v1/models", "/nope", "/openapi.json"} {
			r := httpCall(t, nil, "GET", srv.URL+path, "", requestIDHeader, id)
			if got := r.header.Get(requestIDHeader); got != id {
				t.Errorf("%s: echoed %q, want %q", path, got, id)
			}
		}
	}
}

func TestCORS(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1, card: testCard}, Options{APIKey: "secret"})
	pre := []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization, content-type"}
	r := httpCall(t, nil, "OPTIONS", srv.URL+"/v1/systemone", "", pre...)
	if r.status != 200 || r.body != "OK" ||
		r.header.Get("Access-Control-Allow-Origin") != "*" ||
		r.header.Get("Access-Control-Allow-Methods") != corsMethods ||
		r.header.Get("Access-Control-Allow-Headers") != "authorization, content-type" ||
		r.header.Get("Access-Control-Max-Age") != "600" {
		t.Errorf("preflight: %d %q %v", r.status, r.body, r.header)
	}
	checkCommon(t, r)

	r = httpCall(t, nil, "GET", srv.URL+"/v1/models", "", "Origin", "https://app.example", "Authorization", "Bearer secret")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "*" ||
		r.header.Get("Access-Control-Expose-Headers") != "x-typesafe-request-id, server-timing" {
		t.Errorf("simple request: %d %v", r.status, r.header)
	}
	r = httpCall(t, nil, "GET", srv.URL+"/v1/models", "", "Origin", "https://app.example")
	if r.status != 401 || r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("a 401 a browser can read: %d %v", r.status, r.header)
	}
	r = httpCall(t, nil, "GET", srv.URL+"/openapi.json", "", "Origin", "https://app.example", "Cookie", "a=b")
	if r.header.Get("Access-Control-Allow-Origin") != "https://app.example" || r.header.Get("Vary") != "Origin" {
		t.Errorf("with cookie: %v", r.header)
	}
	r = httpCall(t, nil, "GET", srv.URL+"/openapi.json", "")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no Origin, yet CORS headers: %v", r.header)
	}

	quirk, _ := serve(t, &fakeModel{latency: 1}, Options{APIKey: "secret", AuthPreflight: true})
	if r := httpCall(t, nil, "OPTIONS", quirk.URL+"/v1/systemone", "", pre...); r.status != 401 {
		t.Errorf("AuthPreflight: %d", r.status)
	}
	if r := httpCall(t, nil, "OPTIONS", quirk.URL+"/openapi.json", "", pre...); r.status != 200 {
		t.Errorf("AuthPreflight outside /v1: %d", r.status)
	}
}

const permuteRequest = `{"state":"s","questions":{"q":{"type":"choice","instructions":"Pick","criteria":{"a":null,"b":null}}}}`

func TestPermuteBounds(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 2.5, fixed: map[string]float64{"a": 3, "b": 1}}, Options{})
	for _, n := range []int{0, -1, 65} {
		r := post(t, srv.URL+"/v1/systemone/permute", fmt.Sprintf(`{"request":%s,"question":"q","n_perm":%d}`, permuteRequest, n))
		if r.status != 422 || !strings.Contains(r.body, `"loc":["body","n_perm"]`) {
			t.Errorf("n_perm %d: %d %s", n, r.status, r.body)
		}
	}
	for _, n := range []int{1, 64, 6} {
		body := fmt.Sprintf(`{"request":%s,"question":"q","n_perm":%d}`, permuteRequest, n)
		if n == 6 {
			body = fmt.Sprintf(`{"request":%s,"question":"q"}`, permuteRequest) // the default
		}
		r := post(t, srv.URL+"/v1/systemone/permute", body)
		var out struct {
			Runs []struct {
				Order         []string           `json:"order"`
				Probabilities map[string]float64 `json:"probabilities"`
				Choice        string             `json:"choice"`
				LatencyMS     float64            `json:"latency_ms"`
			} `json:"runs"`
			ArgmaxStable bool               `json:"argmax_stable"`
			Spread       map[string]float64 `json:"spread"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil {
			t.Fatalf("n_perm %d: %d %s", n, r.status, r.body)
		}
		if len(out.Runs) != n || !out.ArgmaxStable || out.Spread["a"] != 0 || out.Spread["b"] != 0 {
			t.Errorf("n_perm %d: %d runs, stable %v, spread %v", n, len(out.Runs), out.ArgmaxStable, out.Spread)
		}
		for _, run := range out.Runs {
			if run.Choice != "a" || run.Probabilities["a"] != 0.75 || run.LatencyMS != 2.5 {
				t.Errorf("run %+v", run)
			}
		}
	}
	if r := post(t, srv.URL+"/v1/systemone/permute", `{"request":{"state":"s","questions":{"q":{"type":"noul"}}},"question":"q"}`); r.status != 422 || r.body != `{"detail":"question must be an existing choice question"}` {
		t.Errorf("noul: %d %s", r.status, r.body)
	}
	if r := post(t, srv.URL+"/v1/systemone/permute", `{"request":`+permuteRequest+`,"question":"missing"}`); r.status != 422 || r.body != `{"detail":"question must be an existing choice question"}` {
		t.Errorf("missing: %d %s", r.status, r.body)
	}
}

// TestPermuteValidation sends every body of testdata/permute_validation.json (pydantic's verdicts). A
// detail that holds NaN or an infinity cannot be sent as JSON: FastAPI answers those with a 500; the handler sends
// the 422 with the input as Python's repr in a string ("nan", "inf"), a deliberate difference (these are not valid
// Kev input, and a 500 would log an error for a client's mistake).
func TestPermuteValidation(t *testing.T) {
	file := loadPermuteFixture(t)
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	for _, c := range file.Cases {
		r := post(t, srv.URL+"/v1/systemone/permute", c.Body)
		if r.status != c.Status && c.Status != 500 {
			t.Errorf("%s: %d, want %d: %s", c.Body, r.status, c.Status, r.body)
			continue
		}
		if c.Status == 500 {
			if r.status != 422 || !strings.Contains(r.body, `"type":"finite_number"`) || !strings.Contains(r.body, `"input":"`) {
				t.Errorf("%s: %d %s, want a 422 on the non-finite input", c.Body, r.status, r.body)
			}
			continue
		}
		if c.Status == 422 {
			want := pyjson.Object(pyjson.M("detail", parse(t, string(c.Detail))))
			got := parse(t, r.body)
			if !pyjson.Equal(got, want) {
				t.Errorf("%s:\n got %s\nwant %s", c.Body, r.body, pyjson.Dumps(want))
			}
			continue
		}
		var out struct{ Runs []json.RawMessage }
		json.Unmarshal([]byte(r.body), &out)
		if len(out.Runs) != c.NPerm {
			t.Errorf("%s: %d runs, want %d", c.Body, len(out.Runs), c.NPerm)
		}
		v := parse(t, c.Body)
		pr, err := systemone.PermuteRequestFromValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Seed.String() != c.Seed || pr.NPerm != c.NPerm {
			t.Errorf("%s: seed %s n %d, want %s %d", c.Body, pr.Seed, pr.NPerm, c.Seed, c.NPerm)
		}
	}
}

type permuteFixture struct {
	Cases []struct {
		Body   string          `json:"body"`
		Status int             `json:"status"`
		NPerm  int             `json:"n_perm"`
		Seed   string          `json:"seed"`
		Detail json.RawMessage `json:"detail"`
	} `json:"cases"`
	Orders []struct {
		Seed string     `json:"seed"`
		Keys []string   `json:"keys"`
		Runs [][]string `json:"runs"`
	} `json:"orders"`
}

func loadPermuteFixture(t *testing.T) permuteFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/permute_validation.json")
	if err != nil {
		t.Fatal(err)
	}
	var f permuteFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) < 40 || len(f.Orders) < 5 {
		t.Fatalf("fixture has %d cases, %d orders", len(f.Cases), len(f.Orders))
	}
	return f
}

// TestPermuteOrdersMatchCPython checks the served orders against random.Random(seed).shuffle, and that the same
// seed gives the same orders twice.
func TestPermuteOrdersMatchCPython(t *testing.T) {
	file := loadPermuteFixture(t)
	srv, _ := serve(t, &fakeModel{latency: 1}, Options{})
	for _, o := range file.Orders {
		crit := make([]string, len(o.Keys))
		for i, k := range o.Keys {
			crit[i] = fmt.Sprintf("%q:%q", k, "about "+k)
		}
		body := fmt.Sprintf(`{"request":{"state":"s","questions":{"q":{"type":"choice","criteria":{%s}}}},"question":"q","n_perm":%d,"seed":%s}`,
			strings.Join(crit, ","), len(o.Runs), o.Seed)
		var first string
		for try := range 2 {
			r := post(t, srv.URL+"/v1/systemone/permute", body)
			var out struct {
				Runs []struct {
					Order         []string        `json:"order"`
					Probabilities json.RawMessage `json:"probabilities"`
				} `json:"runs"`
			}
			if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil {
				t.Fatalf("seed %s: %d %s", o.Seed, r.status, r.body)
			}
			for i, run := range out.Runs {
				if !slices.Equal(run.Order, o.Runs[i]) {
					t.Errorf("seed %s run %d: %v, CPython %v", o.Seed, i, run.Order, o.Runs[i])
				}
				// The probabilities object lists the keys in the run's order.
				var keys []string
				for _, m := range parse(t, string(run.Probabilities)).Members() {
					keys = append(keys, m.Key)
				}
				if !slices.Equal(keys, o.Runs[i]) {
					t.Errorf("seed %s run %d: probability keys %v", o.Seed, i, keys)
				}
			}
			if try == 0 {
				first = r.body
			} else if r.body != first {
				t.Errorf("seed %s: two runs differ", o.Seed)
			}
		}
		seed, _ := new(big.Int).SetString(o.Seed, 10)
		if got := systemone.PermuteOrders(o.Keys, len(o.Runs), seed); !slices.EqualFunc(got, o.Runs, slices.Equal) {
			t.Errorf("PermuteOrders seed %s: %v", o.Seed, got)
		}
	}
}

// TestPermuteSpreadNotRounded uses answers that follow the option's position, so the spread is 0.65 − 0.35,
// which Python prints as 0.30000000000000004.
func TestPermuteSpreadNotRounded(t *testing.T) {
	srv, _ := serve(t, &fakeModel{latency: 1, positional: []float64{0.35, 0.65}}, Options{})
	orders := systemone.PermuteOrders([]string{"a", "b"}, 6, big.NewInt(0))
	flipped := slices.ContainsFunc(orders, func(o []string) bool { return o[0] == "b" })
	if !flipped {
		t.Fatal("seed 0 never flips two keys in 6 runs; pick another seed")
	}
	r := post(t, srv.URL+"/v1/systemone/permute", `{"request":`+permuteRequest+`,"question":"q"}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !strings.HasSuffix(r.body, `"argmax_stable":false,"spread":{"a":0.30000000000000004,"b":0.30000000000000004}}`) {
		t.Errorf("%s", r.body)
	}
	if !strings.HasPrefix(r.body, `{"runs":[{"order":["a","b"],"probabilities":{"a":0.35,"b":0.65},"choice":"b","latency_ms":1.0},`) {
		t.Errorf("%s", r.body)
	}
}

func TestTruncateModeExtras(t *testing.T) {
	m := &fakeModel{latency: 1.25, truncate: true, fixed: map[string]float64{"a": 1, "b": 1}}
	srv, _ := serve(t, m, Options{})
	long := strings.Repeat("x", 40)
	r := post(t, srv.URL+"/v1/systemone/permute", `{"request":{"state":"`+long+`","questions":{"q":{"type":"choice","criteria":{"a":null,"b":null}}}},"question":"q","n_perm":2}`)
	if !strings.HasSuffix(r.body, `"spread":{"a":0.0,"b":0.0},"truncated":true,"usage":{"state_tokens":41,"state_tokens_used":21}}`) {
		t.Errorf("permute: %s", r.body)
	}
	r = post(t, srv.URL+"/v1/systemone/separate", `{"state":"short","questions":{"x":{"type":"noul"},"y":{"type":"choice","criteria":{"a":null,"b":null}}}}`)
	if !strings.HasSuffix(r.body, `"state_tokens":6,"state_tokens_used":6},"latency_ms":2.5,"truncated":false}`) {
		t.Errorf("separate: %s", r.body)
	}
	r = post(t, srv.URL+"/v1/systemone", `{"state":"short","questions":{"x":{"type":"noul"}}}`)
	if !strings.HasSuffix(r.body, `"state_tokens":6,"state_tokens_used":6},"latency_ms":1.25,"truncated":false}`) {
		t.Errorf("systemone: %s", r.body)
	}
}

func TestSeparate(t *testing.T) {
	m := &fakeModel{latency: 0.15}
	srv, _ := serve(t, m, Options{})
	body := `{"state":"The weather is nice today.","model":"jev-latest","questions":{"a":{"type":"noul","instructions":"Nice?"},"b":{"type":"choice","instructions":"Season?","criteria":{"summer":null,"winter":null}},"c":{"type":"score","criteria":["low","high"]}}}`
	r := post(t, srv.URL+"/v1/systemone/separate", body)
	checkCommon(t, r)
	req, _ := systemone.DecodeRequest([]byte(body))
	var answers []systemone.AnswerEntry
	input := 0
	for _, q := range req.Questions {
		resp, err := m.Do(context.Background(), single(req, q))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, resp.Answers...)
		input += resp.Usage.InputTokens
	}
	// 0.15 + 0.15 + 0.15 = 0.44999999999999996 in float64; Python's round(x, 1) gives 0.4.
	want := &systemone.Response{Model: "jev-latest", Answers: answers, LatencyMS: 0.4,
		Usage: systemone.Usage{InputTokens: input, OutputTokens: systemone.OutputTokens(byteTokenizer{}, answers)}}
	if r.status != 200 || r.body != want.String() {
		t.Fatalf("%d %s\nwant %s", r.status, r.body, want)
	}
}

func TestStopAnswers503AndDrains(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 16), block: make(chan struct{})}
	srv, h := serve(t, m, Options{})
	const n = 4
	results := make(chan reply, n)
	for range n {
		go func() { results <- post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`) }()
	}
	for range n {
		<-m.started
	}
	h.Stop()
	r := post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`)
	if r.status != 503 || r.body != `{"detail":"the server is stopping"}` || !r.close {
		t.Errorf("after Stop: %d %s %v", r.status, r.body, r.header)
	}
	if r := httpCall(t, nil, "GET", srv.URL+"/v1/models", ""); r.status != 200 {
		t.Errorf("models after Stop: %d", r.status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if err := h.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain with requests inside: %v", err)
	}
	cancel()
	close(m.block)
	for range n {
		if r := <-results; r.status != 200 {
			t.Errorf("in-flight request: %d %s", r.status, r.body)
		}
	}
	if err := h.Drain(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestShutdownLosesNothing runs a real listener, shuts it down with requests inside the model, and checks every
// one of them is answered while the listener takes no more.
func TestShutdownLosesNothing(t *testing.T) {
	m := &fakeModel{latency: 1, started: make(chan struct{}, 64), block: make(chan struct{})}
	h := newHandler(m, Options{Logger: quietLogger()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	const n = 16
	results := make(chan int, n)
	for i := range n {
		go func() {
			body := fmt.Sprintf(`{"state":"state %d","questions":{"q":{"type":"choice","criteria":{"a":null,"b":null}}}}`, i)
			if i%2 == 0 {
				body = fmt.Sprintf(`{"request":%s,"question":"q","n_perm":3}`, body)
				results <- post(t, url+"/v1/systemone/permute", body).status
				return
			}
			results <- post(t, url+"/v1/systemone", body).status
		}()
	}
	for range n/2 + min(3, systemone.PartsInFlight)*n/2 { // a permute's runs go PartsInFlight at a time
		<-m.started
	}
	h.Stop()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Shutdown")
	}
	close(m.block)
	for range n {
		if s := <-results; s != 200 {
			t.Errorf("in-flight request answered %d", s)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

func TestConcurrentClientsNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	m := &fakeModel{latency: 1}
	h := newHandler(m, Options{Logger: quietLogger()})
	srv := httptest.NewServer(h)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	bodies := []string{conformanceChoice, conformanceObjectState, conformanceStructured}
	want := make([]string, len(bodies))
	for i, b := range bodies {
		req, _ := systemone.DecodeRequest([]byte(b))
		resp, _ := m.Do(context.Background(), req)
		want[i] = resp.String()
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for c := range 32 {
		wg.Go(func() {
			for i := range 10 {
				k := (c + i) % len(bodies)
				r := httpCall(t, client, "POST", srv.URL+"/v1/systemone", bodies[k])
				if r.status != 200 || r.body != want[k] {
					bad.Add(1)
				}
				if i%5 == 0 {
					httpCall(t, client, "GET", srv.URL+"/v1/models", "")
					httpCall(t, client, "GET", srv.URL+"/metrics", "")
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d wrong answers", bad.Load())
	}
	if got := requestCount(h, "/v1/systemone", "POST", 200); got != 320 {
		t.Errorf("metrics count %v requests, want 320", got)
	}
	client.CloseIdleConnections()
	srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, g, buf[:runtime.Stack(buf, true)])
	}
}

func TestMetricsEndpoint(t *testing.T) {
	c := testCard
	c.CUDAGraphs = &systemone.GraphCounts{Captured: 2, Kept: 2, Replays: 11, Eager: 4}
	srv, h := serve(t, &fakeModel{latency: 7, card: c}, Options{})
	post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`)
	post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{}}`)
	httpCall(t, nil, "GET", srv.URL+"/nope/"+strings.Repeat("x", 10), "")
	h.metrics.batches.Observe(3)
	r := httpCall(t, nil, "GET", srv.URL+"/metrics", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %v", r.status, r.header)
	}
	// Label names come sorted, as client_golang writes them.
	for _, line := range []string{
		`kev_http_requests_total{method="POST",path="/v1/systemone",status="200"} 1`,
		`kev_http_requests_total{method="POST",path="/v1/systemone",status="422"} 1`,
		`kev_http_requests_total{method="GET",path="other",status="404"} 1`,
		`kev_http_request_duration_seconds_count{path="/v1/systemone"} 2`,
		`kev_model_latency_seconds_bucket{le="0.005"} 0`,
		`kev_model_latency_seconds_bucket{le="0.01"} 1`,
		`kev_model_latency_seconds_sum 0.007`,
		`# TYPE go_goroutines gauge`,
		`# TYPE process_cpu_seconds_total counter`,
		`kev_batch_size_bucket{le="4"} 1`,
		`kev_batches_total 7`,
		`kev_batched_requests_total 9`,
		`kev_queue_depth 1`,
		`kev_prefix_cache_hits_total 3`,
		`kev_prefix_cache_misses_total 5`,
		`kev_prefix_cache_states 2`,
		`kev_cuda_graphs_captured_total 2`,
		`kev_cuda_graph_replays_total 11`,
		`kev_cuda_graph_eager_total 4`,
		`kev_http_requests_in_flight 0`,
		`# TYPE kev_http_request_duration_seconds histogram`,
		`kev_model_info{backend="go",base="Qwen/Qwen3.5-4B-Base",device="cpu",dtype="float32",run="jaredpalmer/kev-4b"} 1`,
	} {
		if !strings.Contains(r.body, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	checkExposition(t, r.body)
}

// checkExposition checks every line is a comment or "name{labels} value" with a parsable value.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	line := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\+Inf|-Inf|NaN|[-+0-9.eE]+)$`)
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(l, "# HELP ") || strings.HasPrefix(l, "# TYPE ") {
			continue
		}
		if !line.MatchString(l) {
			t.Errorf("bad exposition line %q", l)
		}
	}
}

func TestMetricsLabelEscaping(t *testing.T) {
	c := testCard
	c.Run = `x"y\z` + "\n"
	srv, _ := serve(t, &fakeModel{latency: 1, card: c}, Options{})
	r := httpCall(t, nil, "GET", srv.URL+"/metrics", "")
	if !strings.Contains(r.body, `run="x\"y\\z\n"`) {
		t.Errorf("label not escaped:\n%s", r.body)
	}
	checkExposition(t, r.body)
}

// requestCount returns the requests counted for a path, method and status.
func requestCount(h *Handler, path, method string, status int) float64 {
	var m dto.Metric
	if err := h.metrics.requests.WithLabelValues(path, method, strconv.Itoa(status)).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestPermuteDirect(t *testing.T) {
	m := &fakeModel{latency: 1}
	req := systemone.NewRequest("s", systemone.Choice("q", "Pick", systemone.OptionNames("x", "y", "z")...), systemone.Noul("n", "Other?"))
	out, err := systemone.Permute(context.Background(), m.Do, &systemone.PermuteRequest{Request: req, Question: "q", NPerm: 5, Seed: big.NewInt(42)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 5 || !out.ArgmaxStable {
		t.Fatalf("%+v", out)
	}
	if _, err := systemone.Permute(context.Background(), m.Do, &systemone.PermuteRequest{Request: req, Question: "n", NPerm: 1}); err == nil || err.Error() != "kev: question must be an existing choice question" {
		t.Errorf("noul question: %v", err)
	}
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if !requestIDPattern.MatchString(id) || id[12] != '4' || seen[id] {
			t.Fatalf("id %q", id)
		}
		seen[id] = true
	}
}

// goldenPredictor loads the tiny-a fixture (LoRA checkpoint and its base) on the CPU, or skips without it.
func goldenPredictor(t testing.TB, opts kev.Options) (*kev.Predictor, string) {
	t.Helper()
	kevDir := "../testdata/golden/tiny-a/kev"
	if _, err := os.Stat(kevDir + "/head.pt"); err != nil {
		t.Skip("golden fixture tiny-a not present")
	}
	opts.Base = "../testdata/golden/tiny-a/base"
	opts.Offline = true
	p, err := kev.Load(context.Background(), kevDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, kevDir
}

func servePredictor(t *testing.T, p *kev.Predictor, opts Options) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	srv := httptest.NewServer(New(p, opts))
	t.Cleanup(srv.Close)
	return srv
}

// TestPredictorConformance runs the spec's HTTP conformance requests (§7.3, §7.11) against the real model on the
// tiny fixture: choice basic, null descriptions, structured instructions and criteria, object state with noul and
// score, packed vs alone within 0.011, the accepted one-level score.
func TestPredictorConformance(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{APIKey: "local"})
	conformanceChecks(t, srv.URL, "Authorization", "Bearer local")
	r := post(t, srv.URL+"/v1/systemone", `{"state":"I was charged twice.","model":"jev-latest","questions":{"billing":{"type":"noul","criteria":{"true":"About charges","false":"Not about charges"}},"urgency":{"type":"score","instructions":"How urgent is this?","criteria":["today"]}}}`,
		"Authorization", "Bearer local")
	want := `"urgency":{"type":"score","score":0.0,"legend":{"0":"today"},"probabilities":{"0":1.0},"confidence":1.0}`
	if r.status != 200 || !strings.Contains(r.body, want) || !strings.HasPrefix(r.body, `{"model":"jev-latest","answers":{"billing":{"type":"noul","noul":`) {
		t.Errorf("%d %s", r.status, r.body)
	}
	if r := post(t, srv.URL+"/v1/systemone", conformanceChoice); r.status != 401 {
		t.Errorf("no key: %d", r.status)
	}
}

// withoutLatency drops latency_ms (each batch's own model time) from a response body.
func withoutLatency(t *testing.T, body string) string {
	t.Helper()
	v := parse(t, body)
	var ms []pyjson.Member
	for _, m := range v.Members() {
		if m.Key != "latency_ms" {
			ms = append(ms, m)
		}
	}
	return pyjson.Dumps(pyjson.Object(ms...))
}

// TestPredictorGoldenCases sends the reference requests over HTTP: the body is what Do gives (latency aside), and
// the token counts are the reference's.
func TestPredictorGoldenCases(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{})
	data, err := os.ReadFile("../testdata/golden/tiny-a/reference/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name         string          `json:"name"`
			Request      json.RawMessage `json:"request"`
			InputTokens  int             `json:"input_tokens"`
			OutputTokens int             `json:"output_tokens"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	cases := file.Cases
	if testing.Short() {
		cases = cases[:min(3, len(cases))] // the quick loop; CI sends every case
	}
	for _, c := range cases {
		r := post(t, srv.URL+"/v1/systemone", string(c.Request))
		checkCommon(t, r)
		if r.status != 200 {
			t.Errorf("%s: %d %s", c.Name, r.status, r.body)
			continue
		}
		req, err := systemone.DecodeRequest(c.Request)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := bridge.Predictor(p).Do(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := withoutLatency(t, r.body), withoutLatency(t, resp.String()); got != want {
			t.Errorf("%s:\n http %s\n   do %s", c.Name, got, want)
		}
		var out struct {
			Usage struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal([]byte(r.body), &out)
		if out.Usage.InputTokens != c.InputTokens || (c.OutputTokens > 0 && out.Usage.OutputTokens != c.OutputTokens) {
			t.Errorf("%s: usage %+v, reference %d/%d", c.Name, out.Usage, c.InputTokens, c.OutputTokens)
		}
	}
}

// TestPredictorSeparateAndPermute checks separate against each question asked alone, and permute's runs against
// the same question asked in each run's order, on the real model.
func TestPredictorSeparateAndPermute(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{})
	body := `{"state":` + conformancePackedState + `,"model":"m","questions":{` + conformancePackedA + `,` + conformancePackedB +
		`,"c":{"type":"score","instructions":"How busy?","criteria":["empty","some","full"]}}}`
	r := post(t, srv.URL+"/v1/systemone/separate", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	req, _ := systemone.DecodeRequest([]byte(body))
	var answers []systemone.AnswerEntry
	input := 0
	for _, q := range req.Questions {
		resp, err := bridge.Predictor(p).Do(context.Background(), single(req, q))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, resp.Answers...)
		input += resp.Usage.InputTokens
	}
	want := &systemone.Response{Model: "m", Answers: answers, Usage: systemone.Usage{InputTokens: input, OutputTokens: systemone.OutputTokens(bridge.Predictor(p).Tokenizer(), answers)}}
	if got := withoutLatency(t, r.body); got != withoutLatency(t, want.String()) {
		t.Errorf("separate:\n got %s\nwant %s", got, withoutLatency(t, want.String()))
	}

	pbody := `{"request":{"state":"My running shoes arrived in the wrong size.","questions":{"department":{"type":"choice","instructions":"Which team should handle this?","criteria":` +
		department + `}}},"question":"department","n_perm":6,"seed":42}`
	r = post(t, srv.URL+"/v1/systemone/permute", pbody)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var out struct {
		Runs []struct {
			Order         []string           `json:"order"`
			Probabilities map[string]float64 `json:"probabilities"`
			Choice        string             `json:"choice"`
		} `json:"runs"`
		ArgmaxStable bool               `json:"argmax_stable"`
		Spread       map[string]float64 `json:"spread"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		t.Fatal(err)
	}
	keys := []string{"returns", "shipping", "billing"}
	orders := systemone.PermuteOrders(keys, 6, big.NewInt(42))
	if len(out.Runs) != 6 {
		t.Fatalf("%d runs", len(out.Runs))
	}
	stable := true
	for i, run := range out.Runs {
		if !slices.Equal(run.Order, orders[i]) {
			t.Errorf("run %d order %v, want %v", i, run.Order, orders[i])
		}
		crit := make([]string, len(run.Order))
		for j, k := range run.Order {
			d, _ := parse(t, department).Get(k)
			crit[j] = fmt.Sprintf("%q:%q", k, d.AsString())
		}
		alone := post(t, srv.URL+"/v1/systemone", `{"state":"My running shoes arrived in the wrong size.","questions":{"department":{"type":"choice","instructions":"Which team should handle this?","criteria":{`+strings.Join(crit, ",")+`}}}}`)
		var a struct {
			Answers map[string]struct {
				Choice        string             `json:"choice"`
				Probabilities map[string]float64 `json:"probabilities"`
			} `json:"answers"`
		}
		json.Unmarshal([]byte(alone.body), &a)
		if !maps.Equal(a.Answers["department"].Probabilities, run.Probabilities) || a.Answers["department"].Choice != run.Choice {
			t.Errorf("run %d: %v, alone %v", i, run.Probabilities, a.Answers["department"])
		}
		stable = stable && run.Choice == out.Runs[0].Choice
	}
	if stable != out.ArgmaxStable {
		t.Errorf("argmax_stable %v", out.ArgmaxStable)
	}
	for _, k := range keys {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, run := range out.Runs {
			lo, hi = math.Min(lo, run.Probabilities[k]), math.Max(hi, run.Probabilities[k])
		}
		if out.Spread[k] != hi-lo {
			t.Errorf("spread[%s] %v, want %v", k, out.Spread[k], hi-lo)
		}
	}
}

// TestPredictorCard checks the card of the loaded fixture and that its counters move.
func TestPredictorCard(t *testing.T) {
	p, kevDir := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{})
	post(t, srv.URL+"/v1/systemone", conformanceChoice)
	r := httpCall(t, nil, "GET", srv.URL+"/v1/models", "")
	info := p.Info()
	prefix := fmt.Sprintf(`{"models":[{"name":"kev-latest","description":"Kev pointer head on %s, serving %s at temperature 2.41","release_date":"%s","run":"%s","base":"%s","lora":8,"device":"cpu","backend":"%s","dtype":"float32","temperature":%s,"max_state_tokens":65536,"truncate_states":false,"cuda_graphs":null,"prefix_cache":{"size":4,`,
		info.Base, kevDir, info.ReleaseDate, kevDir, info.Base, info.Backend, pyjson.FormatFloat(info.Temperature))
	if r.status != 200 || !strings.HasPrefix(r.body, prefix) || !strings.Contains(r.body, `{"name":"jev-latest","description":"Kev pointer head on`) {
		t.Errorf("%d %s\nwant prefix %s", r.status, r.body, prefix)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d$`).MatchString(info.ReleaseDate) {
		t.Errorf("release date %q", info.ReleaseDate)
	}
	if !strings.Contains(r.body, `"batches":{"count":1,"requests":1,"queued":0}}`) {
		t.Errorf("batches: %s", r.body)
	}
	// The predictor reports its batches to the handler's metrics.
	m := httpCall(t, nil, "GET", srv.URL+"/metrics", "")
	for _, line := range []string{"kev_batch_size_count 1", `kev_batch_size_bucket{le="1"} 1`, "kev_batches_total 1"} {
		if !strings.Contains(m.body, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// TestPredictorTruncateMode checks a truncating server's extras on the real model.
func TestPredictorTruncateMode(t *testing.T) {
	p, _ := goldenPredictor(t, kev.Options{TruncateStates: true})
	srv := servePredictor(t, p, Options{})
	r := post(t, srv.URL+"/v1/systemone", conformanceObjectState)
	if r.status != 200 || !strings.HasSuffix(r.body, `,"truncated":false}`) || !strings.Contains(r.body, `"state_tokens":`) {
		t.Errorf("%d %s", r.status, r.body)
	}
	r = post(t, srv.URL+"/v1/systemone/permute", `{"request":`+conformanceChoice+`,"question":"department","n_perm":2}`)
	if r.status != 200 || !regexp.MustCompile(`,"truncated":false,"usage":\{"state_tokens":(\d+),"state_tokens_used":(\d+)\}\}$`).MatchString(r.body) {
		t.Errorf("%d %s", r.status, r.body)
	}
}

// TestPredictorLoad is a CI-sized loopback load test on the tiny fixture: 1, 32 and 64 concurrent clients, each
// sending at most two requests within half a second, with the key set. It writes the bench report (to $KEV_HTTP_BENCH_OUT when set) and
// checks no request failed, the protocol checks held and every answer to a body was the same.
func TestPredictorLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	p, _ := goldenPredictor(t, kev.Options{})
	srv := servePredictor(t, p, Options{APIKey: "bench"})
	bodies := [][]byte{[]byte(conformanceChoice), []byte(`{"state":"Shoes arrived late.","questions":{"escalate":{"type":"noul","instructions":"Urgent?"}}}`),
		[]byte(conformanceNullDescriptions), []byte(`{"state":"Charged twice.","questions":{"tone":{"type":"score","criteria":["calm","angry"]}}}`)}
	rep, err := loadtest.Run(context.Background(), loadtest.Config{URL: srv.URL, APIKey: "bench", Bodies: bodies,
		Levels: []int{1, 32, 64}, Duration: 500 * time.Millisecond, PerClient: 2, Warmup: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("KEV_HTTP_BENCH_OUT")
	if out == "" {
		out = t.TempDir() + "/http-bench.json"
	}
	if err := os.WriteFile(out, rep.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", rep.JSON())
	if !rep.Protocol.OK || rep.Protocol.Unauthorized != 401 || rep.Protocol.Invalid != 422 || !rep.AnswersEqual {
		t.Errorf("protocol %+v, answers equal %v (%d mismatches)", rep.Protocol, rep.AnswersEqual, rep.Mismatches)
	}
	for _, lv := range rep.Levels {
		if lv.Requests == 0 || lv.Errors != 0 || lv.ModelP50 <= 0 || lv.ProcessP50 <= 0 {
			t.Errorf("level %+v", lv)
		}
	}
	if st := p.Stats(); st.Batches.Requests <= st.Batches.Count && rep.Levels[2].Requests > 64 {
		t.Logf("no batch held more than one request (%d batches, %d requests)", st.Batches.Count, st.Batches.Requests)
	}
}

// nonFinite matches JSON that Python reads as NaN or an infinity.
var nonFinite = regexp.MustCompile(`NaN|Infinity|[0-9.][eE][+-]?0*[0-9]{3}`)

// FuzzHandler sends arbitrary bodies to the three model endpoints: every answer is 200, a 4xx with a JSON detail,
// or (for a detail that would hold NaN or an infinity, which JSON cannot carry) the 500 FastAPI gives.
func FuzzHandler(f *testing.F) {
	f.Add("/v1/systemone", conformanceObjectState)
	f.Add("/v1/systemone/separate", conformanceChoice)
	f.Add("/v1/systemone/permute", `{"request":`+permuteRequest+`,"question":"q","n_perm":"3","seed":-7}`)
	f.Add("/v1/systemone/permute", `{"request":`+permuteRequest+`,"question":"q","n_perm":NaN}`)
	f.Add("/v1/systemone", `{"state": [1, 2.5, {"a": null}], "questions": {"q": {"type": "score", "criteria": [true]}}}`)
	f.Add("/v1/systemone", "\xff\xfe")
	h := newHandler(&fakeModel{latency: 1}, Options{Logger: quietLogger(), MaxBodyBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, path, body string) {
		switch path {
		case "/v1/systemone", "/v1/systemone/separate", "/v1/systemone/permute":
		default:
			return
		}
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, req)
		switch c := w.Code; {
		case c == 200, c == 400, c == 413, c == 422:
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%d body is not JSON: %q", c, w.Body.String())
			}
		case c == 500 && nonFinite.MatchString(body):
		default:
			t.Fatalf("%s %q: %d %s", path, body, c, w.Body.String())
		}
	})
}

// TestHealth checks the probes: open even with a key, /readyz 503 while draining or stopped, /v1/models still behind
// the key as in Kev.
func TestHealth(t *testing.T) {
	srv, h := serve(t, &fakeModel{latency: 1, card: testCard}, Options{APIKey: "secret"})
	for _, c := range []struct {
		path, body string
		status     int
	}{{"/healthz", `{"status":"ok"}`, 200}, {"/readyz", `{"status":"ready"}`, 200}, {"/v1/models", "", 401}} {
		r := httpCall(t, nil, "GET", srv.URL+c.path, "")
		checkCommon(t, r)
		if r.status != c.status || (c.body != "" && r.body != c.body) {
			t.Errorf("GET %s: %d %s", c.path, r.status, r.body)
		}
		if r := httpCall(t, nil, "HEAD", srv.URL+c.path, ""); r.status != c.status || r.body != "" {
			t.Errorf("HEAD %s: %d %q", c.path, r.status, r.body)
		}
	}
	if r := post(t, srv.URL+"/healthz", `{}`); r.status != 405 {
		t.Errorf("POST /healthz: %d", r.status)
	}
	h.SetDraining(true)
	if r := httpCall(t, nil, "GET", srv.URL+"/readyz", ""); r.status != 503 || r.body != `{"status":"draining"}` {
		t.Errorf("draining: %d %s", r.status, r.body)
	}
	if r := httpCall(t, nil, "GET", srv.URL+"/healthz", ""); r.status != 200 {
		t.Errorf("draining, liveness: %d", r.status)
	}
	// Draining only turns readiness off: requests are still answered.
	if r := post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`, "Authorization", "Bearer secret"); r.status != 200 {
		t.Errorf("draining, request: %d %s", r.status, r.body)
	}
	h.SetDraining(false)
	if r := httpCall(t, nil, "GET", srv.URL+"/readyz", ""); r.status != 200 {
		t.Errorf("no longer draining: %d", r.status)
	}
	h.Stop()
	if r := httpCall(t, nil, "GET", srv.URL+"/readyz", ""); r.status != 503 {
		t.Errorf("stopped: %d", r.status)
	}
	if r := httpCall(t, nil, "GET", srv.URL+"/healthz", ""); r.status != 200 {
		t.Errorf("stopped, liveness: %d", r.status)
	}
}

// TestCollector registers the handler with a registry of the embedding service's own, pedantic about descriptions.
func TestCollector(t *testing.T) {
	c := testCard
	c.CUDAGraphs = &systemone.GraphCounts{Captured: 2, Kept: 2}
	srv, h := serve(t, &fakeModel{latency: 7, card: c}, Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	post(t, srv.URL+"/v1/systemone", `{"state":"s","questions":{"q":{"type":"noul"}}}`)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	for _, name := range []string{"kev_http_requests_total", "kev_http_request_duration_seconds", "kev_model_latency_seconds",
		"kev_batch_size", "kev_http_requests_in_flight", "kev_batches_total", "kev_cuda_graphs_captured_total", "kev_model_info"} {
		if got[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if mf := got["kev_http_requests_total"]; mf != nil {
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["path"] != "/v1/systemone" || labels["method"] != "POST" || labels["status"] != "200" || m.GetCounter().GetValue() != 1 {
			t.Errorf("%v %v", labels, m.GetCounter().GetValue())
		}
	}
	// Registering twice in one registry is refused, as for any collector.
	if err := reg.Register(h); err == nil {
		t.Error("registered twice")
	}
}
