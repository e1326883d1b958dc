package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/systemone"
)

// TestOpenAPIComplete checks the OpenAPI document: every operation under /v1 lists 401, every 200 and every
// error status has a response schema, and every $ref names a schema the document defines.
func TestOpenAPIComplete(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]struct{ Responses map[string]json.RawMessage } `json:"paths"`
		Components struct{ Schemas map[string]json.RawMessage }                         `json:"components"`
	}
	if err := json.Unmarshal([]byte(openAPI), &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if strings.HasPrefix(path, "/v1") && op.Responses["401"] == nil {
				t.Errorf("%s %s: no 401", method, path)
			}
			for status, r := range op.Responses {
				var resp struct {
					Content map[string]struct{ Schema json.RawMessage }
				}
				if err := json.Unmarshal(r, &resp); err != nil || resp.Content["application/json"].Schema == nil {
					t.Errorf("%s %s %s: no JSON schema (%v)", method, path, status, err)
				}
			}
		}
	}
	for _, part := range strings.Split(openAPI, `"$ref":"#/components/schemas/`)[1:] {
		name, _, _ := strings.Cut(part, `"`)
		if doc.Components.Schemas[name] == nil {
			t.Errorf("$ref to undefined schema %s", name)
		}
	}
}

// TestDefaultsMatchLimits keeps the documented defaults, written as numbers, equal to the protocol's limits.
func TestDefaultsMatchLimits(t *testing.T) {
	if DefaultMaxInflightTokens != 64*systemone.MaxStateTokens {
		t.Errorf("DefaultMaxInflightTokens %d, want 64 states at the %d-token limit", DefaultMaxInflightTokens, systemone.MaxStateTokens)
	}
}
