package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sdkDir holds the drop-in test's node project: package.json and package-lock.json pin the official TypeSafe JS
// SDK, sdk.mjs drives a server with it.
const sdkDir = "sdktest"

// needTool finds a program the SDK test needs. Where it is missing the test skips, except under CI (CI set),
// whose machines must have it.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; CI must run the TypeSafe SDK test (.ci/run installs node and npm)", name)
		}
		t.Skipf("%s is not installed: the TypeSafe SDK drop-in test needs node ≥ 20 and npm", name)
	}
	return p
}

// registryDown matches npm's messages for a registry it cannot reach.
var registryDown = regexp.MustCompile(`ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|socket hang up`)

// TestTypeSafeSDK runs the official TypeSafe JS SDK (@typesafe-ai/sdk 0.6.0, unmodified, installed with npm into
// sdktest/) against the kev command built as a user builds it, serving the built-in test checkpoint from a
// directory outside the repository with an API key: the models list, a noul/choice/score request with the SDK's
// default model, structured state and instructions, a 422 and a 401 as the SDK's typed errors. The answers the
// SDK returns must be the ones kev ask gives for the same request bodies.
func TestTypeSafeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (builds the command, installs the SDK with npm): runs without -short")
	}
	node := needTool(t, "node")
	npm := needTool(t, "npm")
	if out, err := exec.Command(node, "--version").Output(); err != nil {
		t.Fatalf("node --version: %v", err)
	} else if major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v")); major < 20 {
		t.Fatalf("node %s: the SDK needs node 20 or newer", bytes.TrimSpace(out))
	}
	goTool := needTool(t, "go")

	// npm ci: exactly the locked SDK, into sdktest/node_modules.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--prefer-offline", "--no-audit", "--no-fund")
	ci.Dir = sdkDir
	if out, err := ci.CombinedOutput(); err != nil {
		if registryDown.Match(out) {
			t.Skipf("npm cannot reach its registry to install the TypeSafe SDK:\n%s", out)
		}
		t.Fatalf("npm ci in %s: %v\n%s", sdkDir, err, out)
	}

	// The command, built as go install builds it, run from a directory outside the repository.
	bin := filepath.Join(t.TempDir(), "kev")
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := t.TempDir()
	srv := exec.Command(bin, "serve", "-addr", "127.0.0.1:0", "-log-format", "json")
	srv.Dir = work
	srv.Env = append(os.Environ(), "KEV_API_KEY=secret", "TMPDIR="+work)
	logs, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		srv.Process.Kill()
		<-exited
	})
	var logText syncBuffer
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			logText.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "kev: serving" {
				urls <- line.URL
			}
		}
		io.Copy(io.Discard, logs)
		exited <- srv.Wait()
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-exited:
		exited <- err
		t.Fatalf("kev serve exited before serving: %v\n%s", err, logText.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("kev serve did not start:\n%s", logText.String())
	}

	script := exec.CommandContext(ctx, node, "sdk.mjs")
	script.Dir = sdkDir
	script.Env = append(os.Environ(), "KEV_URL="+url, "KEV_KEY=secret")
	var scriptErr bytes.Buffer
	script.Stderr = &scriptErr
	out, err := script.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\n%s\n%s\nserver log:\n%s", err, out, scriptErr.String(), logText.String())
	}
	var got sdkResult
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	if got.SDK != "0.6.0" || got.DefaultModel != "jev-latest" {
		t.Errorf("SDK %q with default model %q, want 0.6.0 and jev-latest", got.SDK, got.DefaultModel)
	}
	var names []string
	for _, m := range got.Models {
		names = append(names, m.Name)
		if m.Description == "" || m.ReleaseDate == "" {
			t.Errorf("model card %+v", m)
		}
	}
	if !reflect.DeepEqual(names, []string{"kev-latest", "jev-latest"}) {
		t.Errorf("models.list: %q", names)
	}

	requestID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, c := range []struct {
		name  string
		call  sdkCall
		model string
		types map[string]string
	}{
		{"ticket", got.Ticket, "jev-latest", map[string]string{"billing": "noul", "department": "choice", "urgency": "score"}},
		{"structured", got.Structured, "kev-latest", map[string]string{"refund": "noul", "channel": "choice", "mood": "score"}},
	} {
		var resp struct {
			Model   string                     `json:"model"`
			Answers map[string]json.RawMessage `json:"answers"`
			Usage   struct {
				Input  int `json:"input_tokens"`
				Output int `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(c.call.Response, &resp); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.Model != c.model || len(resp.Answers) != len(c.types) || resp.Usage.Input <= 0 || resp.Usage.Output <= 0 {
			t.Errorf("%s: %s", c.name, c.call.Response)
		}
		for id, typ := range c.types {
			var a struct{ Type string }
			if json.Unmarshal(resp.Answers[id], &a); a.Type != typ {
				t.Errorf("%s: answer %s is %s, want a %s", c.name, id, resp.Answers[id], typ)
			}
		}
		if !requestID.MatchString(c.call.RequestID) {
			t.Errorf("%s: request id %q", c.name, c.call.RequestID)
		}
		// The same request body through kev ask: the same answers, model and usage.
		ask := exec.CommandContext(ctx, bin, "ask")
		ask.Dir = work
		ask.Stdin = bytes.NewReader(c.call.Request)
		want, err := ask.Output()
		if err != nil {
			t.Fatalf("%s: kev ask: %v", c.name, err)
		}
		if g, w := withoutLatency(t, c.call.Response), withoutLatency(t, want); !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the SDK got\n%s\nkev ask answers the same body with\n%s", c.name, c.call.Response, want)
		}
	}

	inv := got.Invalid
	if !inv.Thrown || inv.Class != "UnprocessableEntityError" || !inv.Unprocessable || !inv.APIError || inv.Status != 422 ||
		!requestID.MatchString(inv.RequestID) || !strings.Contains(inv.Message, "criteria must have 1..255 options") {
		t.Errorf("422: %+v", inv)
	}
	var detail struct {
		Detail []struct {
			Type string `json:"type"`
			Loc  []any  `json:"loc"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(inv.Body, &detail); err != nil || len(detail.Detail) == 0 ||
		!reflect.DeepEqual(detail.Detail[0].Loc[:3], []any{"body", "questions", "team"}) {
		t.Errorf("422 body %s (%v)", inv.Body, err)
	}
	un := got.Unauthorized
	if !un.Thrown || un.Class != "AuthenticationError" || !un.Authentication || un.Status != 401 ||
		string(un.Body) != `{"detail":"missing or invalid API key; send Authorization: Bearer <KEV_API_KEY>"}` {
		t.Errorf("401: %+v body %s", un, un.Body)
	}

	// SIGTERM: a clean stop, and the unpacked checkpoint is gone.
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("kev serve after SIGTERM: %v\n%s", err, logText.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("kev serve did not stop at SIGTERM")
	}
	if left, _ := filepath.Glob(filepath.Join(work, "kev-bundled-*")); len(left) != 0 {
		t.Errorf("left behind: %q", left)
	}
}

// sdkResult is what sdktest/sdk.mjs prints.
type sdkResult struct {
	SDK          string `json:"sdk"`
	DefaultModel string `json:"defaultModel"`
	Models       []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		ReleaseDate string `json:"release_date"`
	} `json:"models"`
	Ticket, Structured    sdkCall
	Invalid, Unauthorized sdkError
}

// sdkCall is a request the SDK sent (as the body it posts) and the response it returned.
type sdkCall struct {
	Request   json.RawMessage `json:"request"`
	Response  json.RawMessage `json:"response"`
	RequestID string          `json:"requestId"`
}

// sdkError is how an error surfaced through the SDK.
type sdkError struct {
	Thrown         bool            `json:"thrown"`
	Class          string          `json:"class"`
	TypeSafeError  bool            `json:"typeSafeError"`
	APIError       bool            `json:"apiError"`
	Unprocessable  bool            `json:"unprocessable"`
	Authentication bool            `json:"authentication"`
	Status         int             `json:"status"`
	Body           json.RawMessage `json:"body"`
	RequestID      string          `json:"requestId"`
	Message        string          `json:"message"`
}

// withoutLatency decodes a System One response and drops latency_ms, the one field that differs between runs.
func withoutLatency(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	delete(m, "latency_ms")
	return m
}
