package kev

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Client asks a System One server over HTTP — kev serve (package server) or Kev's own server — with the methods
// of a Predictor, so that code written against Asker runs on either. It is safe for concurrent use.
type Client struct {
	// URL is the server's root, e.g. "http://localhost:8000"; requests go to URL + "/v1/systemone".
	URL string
	// APIKey, when not empty, is sent as "Authorization: Bearer <APIKey>" (the server's KEV_API_KEY).
	APIKey string
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

var _ Asker = (*Client)(nil)

// NewClient returns a client of the System One server at url, sending apiKey when it is not empty.
func NewClient(url, apiKey string) *Client {
	return &Client{URL: strings.TrimRight(url, "/"), APIKey: apiKey}
}

// HTTPError is a server's answer other than 200 that is not a validation error: its status, the "detail" of its
// JSON body when it has one (else the body's text), and for 503 how long the server asks the client to wait.
type HTTPError struct {
	StatusCode int
	Detail     string
	RetryAfter time.Duration // from Retry-After; 0 when absent
}

// Error names the status and the server's detail.
func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("kev: server answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Ask answers questions about a state, as Predictor.Ask does, on the server.
func (c *Client) Ask(ctx context.Context, state any, questions ...QuestionEntry) ([]AnswerEntry, error) {
	req, err := askRequest(state, questions)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Answers, nil
}

// Do sends a System One request to the server and returns its response. A request the server refuses with 422
// and a validation detail list is a *ValidationError, as Predictor.Do returns; any other status is an *HTTPError; a
// body that is not a System One response is a *ResponseError.
func (c *Client) Do(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, errors.New("kev: Do: nil request")
	}
	body, err := req.MarshalJSON()
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+"/v1/systemone", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if c.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(hr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, statusError(res, data)
	}
	out := &Response{}
	if err := out.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return out, nil
}

// statusError reads a refusal: pydantic's detail list of a 422 as a *ValidationError, else an *HTTPError.
func statusError(res *http.Response, data []byte) error {
	var body struct {
		Detail json.RawMessage `json:"detail"`
	}
	_ = json.Unmarshal(data, &body)
	if res.StatusCode == http.StatusUnprocessableEntity {
		var items []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		}
		if json.Unmarshal(body.Detail, &items) == nil && len(items) > 0 {
			ve := &ValidationError{}
			for _, it := range items {
				ve.Problems = append(ve.Problems, Problem{Field: locField(it.Loc), Msg: it.Msg})
			}
			return ve
		}
	}
	e := &HTTPError{StatusCode: res.StatusCode, Detail: strings.TrimSpace(string(data))}
	var s string
	if json.Unmarshal(body.Detail, &s) == nil {
		e.Detail = s
	}
	if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	return e
}

// locField turns pydantic's location of a problem (["body", "questions", "a", "type"]) into a Problem's Field
// ("questions.a.type", indexes in brackets).
func locField(loc []any) string {
	if len(loc) > 0 && loc[0] == "body" {
		loc = loc[1:]
	}
	var sb strings.Builder
	for _, l := range loc {
		switch v := l.(type) {
		case float64:
			fmt.Fprintf(&sb, "[%d]", int(v))
		default:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			fmt.Fprint(&sb, v)
		}
	}
	return sb.String()
}
