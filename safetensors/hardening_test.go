package safetensors

import (
	"errors"
	"strings"
	"testing"
)

// TestHardeningHeaderMessages: a header's names and values appear in errors
// only as short quoted prefixes, however large they are.
func TestHardeningHeaderMessages(t *testing.T) {
	big := strings.Repeat("7", 1<<20)
	name := strings.Repeat("n", 1<<20)
	tests := []struct{ name, header string }{
		{"long tensor name, bad dtype", `{"` + name + `":{"dtype":"X","shape":[1],"data_offsets":[0,1]}}`},
		{"long dtype", `{"x":{"dtype":"` + name + `","shape":[1],"data_offsets":[0,1]}}`},
		{"long dimension", `{"x":{"dtype":"U8","shape":[` + big + `],"data_offsets":[0,1]}}`},
		{"long offset", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[` + big + `,1]}}`},
		{"unknown field", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"` + name + `":1}}`},
		{"many dims", `{"x":{"dtype":"U8","shape":[` + strings.Repeat("1,", 100000) + `2],"data_offsets":[0,1]}}`},
		{"metadata key", `{"__metadata__":{"` + name + `":1}}`},
		{"top-level number", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("evil.safetensors", rawFile(tc.header, 1))
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got %T %.200v", err, err)
			}
			if n := len(err.Error()); n > 800 {
				t.Fatalf("message of %d bytes: %.300s", n, err)
			}
		})
	}
}

// hardeningHeaderSeeds are FuzzParseHeader seeds with oversized names and
// numbers.
func hardeningHeaderSeeds() [][]byte {
	long := strings.Repeat("7", 300)
	return [][]byte{
		rawFile(`{"`+strings.Repeat("n", 300)+`":{"dtype":"X","shape":[1],"data_offsets":[0,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[`+long+`],"data_offsets":[0,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[1],"data_offsets":[`+long+`,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[`+strings.Repeat("1,", 40)+`1],"data_offsets":[0,1]}}`, 1),
		rawFile(long, 1),
	}
}
