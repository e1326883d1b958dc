package quote

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	long := strings.Repeat("a", 5<<20)
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"abc\n", `"abc\n"`},
		{strings.Repeat("x", Max), `"` + strings.Repeat("x", Max) + `"`},
		{strings.Repeat("x", Max+1), `"` + strings.Repeat("x", Max) + `"…(65 bytes)`},
		{long, `"` + strings.Repeat("a", Max) + `"…(5242880 bytes)`},
		// A three-byte rune straddling byte 64 is left out whole.
		{strings.Repeat("x", Max-1) + "€€", `"` + strings.Repeat("x", Max-1) + `"…(69 bytes)`},
		{strings.Repeat("x", Max-1) + "\xff\xfe", `"` + strings.Repeat("x", Max-1) + `\xff"…(65 bytes)`},
	}
	for _, tc := range tests {
		got := String(tc.in)
		if got != tc.want {
			t.Errorf("String(%.20q…) = %s, want %s", tc.in, got, tc.want)
		}
		if b := Bytes([]byte(tc.in)); b != got {
			t.Errorf("Bytes = %s, String = %s", b, got)
		}
		if len(got) > 4*Max+32 {
			t.Errorf("String gave %d bytes", len(got))
		}
	}
}

func TestNameAndError(t *testing.T) {
	if got := Name("model.norm.weight"); got != `"model.norm.weight"` {
		t.Errorf("Name = %s", got)
	}
	long := strings.Repeat("n", 1000)
	if got := Name(long); got != `"`+long[:MaxName]+`"…(1000 bytes)` {
		t.Errorf("Name = %s", got)
	}
	if got := Error(errors.New("short")); got != "short" {
		t.Errorf("Error = %s", got)
	}
	if got := Error(errors.New(long)); got != long[:MaxMessage]+"…(1000 bytes)" {
		t.Errorf("Error = %s", got)
	}
}

func ExampleString() {
	fmt.Println(String("refs/main"))
	fmt.Println(String(strings.Repeat("0", 1000)))
	// Output:
	// "refs/main"
	// "0000000000000000000000000000000000000000000000000000000000000000"…(1000 bytes)
}
