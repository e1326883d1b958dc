package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kevgo/kev"
)

// runCmd runs a command line in-process with the given standard input and returns its status and output.
func runCmd(t *testing.T, in string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	stdin, stdout, stderr = strings.NewReader(in), &out, &errOut
	t.Cleanup(func() { stdin, stdout, stderr = os.Stdin, os.Stdout, os.Stderr })
	code := run(args)
	return code, out.String(), errOut.String()
}

var latency = regexp.MustCompile(`"latency_ms":[0-9.e+-]+`)

// TestAsk runs the README's first command, kev ask on the bundled request with no flags, and checks its output
// against the library's answer to the same request.
func TestAsk(t *testing.T) {
	req, err := os.ReadFile(filepath.Join("testdata", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, string(req), "ask")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if !strings.Contains(errOut, "float32 weights on cpu: ") || !strings.Contains(errOut, " MiB") {
		t.Errorf("stderr %q does not report the weights' memory", errOut)
	}
	if !strings.HasSuffix(out, "}\n") || !latency.MatchString(out) {
		t.Fatalf("output %q", out)
	}

	p, err := kev.Load(context.Background(), repoTinyA("kev"), kev.Options{Base: repoTinyA("base")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var r kev.Request
	if err := r.UnmarshalJSON(req); err != nil {
		t.Fatal(err)
	}
	resp, err := p.Do(context.Background(), &r)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := resp.MarshalJSON()
	got := latency.ReplaceAllString(strings.TrimSuffix(out, "\n"), `"latency_ms":0`)
	if w := latency.ReplaceAllString(string(want), `"latency_ms":0`); got != w {
		t.Errorf("kev ask printed\n%s\nthe library answers\n%s", got, w)
	}
	for _, s := range []string{`"billing":{"type":"noul"`, `"department":{"type":"choice"`, `"urgency":{"type":"score"`} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %s", s)
		}
	}
}

func TestAskFlags(t *testing.T) {
	req, _ := os.ReadFile(filepath.Join("testdata", "request.json"))
	code, out, errOut := runCmd(t, string(req), "ask", "-checkpoint", repoTinyA("kev-full"), "-dtype", "bf16")
	if code != 0 || !strings.Contains(errOut, "bfloat16 weights on cpu") || !strings.Contains(out, `"answers":{"billing"`) {
		t.Errorf("kev-full bf16: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		name, in string
		args     []string
		code     int
		stderr   string
	}{
		{"no command", "", nil, 2, "Commands:"},
		{"unknown command", "", []string{"fly"}, 2, `unknown command "fly"`},
		{"help", "", []string{"help"}, 0, ""},
		{"command help", "", []string{"ask", "-h"}, 0, "-checkpoint"},
		{"bad flag", "", []string{"ask", "-x"}, 2, "flag provided but not defined: -x"},
		{"two inputs", "", []string{"ask", "a.json", "b.json"}, 2, `more than one input: "a.json" and "b.json"`},
		{"missing input", "", []string{"ask", "no-such-request.json"}, 1, "no-such-request.json: no such file"},
		{"bad json", "{", []string{"ask"}, 1, "invalid request: malformed JSON at character 1"},
		{"no questions", `{"state": "x"}`, []string{"ask"}, 1, "invalid request: questions: field required"},
		{"bad type", `{"state": "x", "questions": {"a": {"type": "yes"}}}`, []string{"ask"}, 1, `invalid request: questions.a.type: must be "noul", "choice" or "score"`},
		{"missing checkpoint", `{"state": "x", "questions": {"q": {"type": "noul"}}}`, []string{"ask", "-checkpoint", "/no/such/kev"}, 1, "/no/such/kev"},
		{"bad dtype", `{"state": "x", "questions": {"q": {"type": "noul"}}}`, []string{"ask", "-dtype", "int8"}, 1, "Options.DType"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, c.in, c.args...)
			if code != c.code || !strings.Contains(errOut, c.stderr) {
				t.Errorf("exit %d, want %d; stderr %q, want it to contain %q", code, c.code, errOut, c.stderr)
			}
		})
	}
}

// TestAskFile checks that kev ask reads a request from a named file as from standard input, and that a state over
// the limit is refused with the flag that reads its start named.
func TestAskFile(t *testing.T) {
	path := filepath.Join("testdata", "request.json")
	req, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, fromStdin, _ := runCmd(t, string(req), "ask")
	code, fromFile, errOut := runCmd(t, "", "ask", path)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if a, b := latency.ReplaceAllString(fromFile, ""), latency.ReplaceAllString(fromStdin, ""); a != b || a == "" {
		t.Errorf("kev ask %s printed\n%s\nfrom standard input\n%s", path, a, b)
	}

	long := `{"state": "` + strings.Repeat("word ", 70000) + `", "questions": {"q": {"type": "noul"}}}`
	code, _, errOut = runCmd(t, long, "ask")
	if code != 1 || !strings.Contains(errOut, "pass -truncate-states") || strings.Contains(errOut, "KEV_TRUNCATE_STATES") {
		t.Errorf("a state over the limit: exit %d, stderr %q; want 1 and the -truncate-states flag named", code, errOut)
	}
}
