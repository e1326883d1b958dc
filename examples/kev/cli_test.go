package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/kevgo/kev"
)

// repoTinyA is a directory of the repository's tiny-a golden checkpoint.
func repoTinyA(dir string) string {
	return filepath.Join("..", "..", "testdata", "golden", "tiny-a", dir)
}

// TestBundledMatchesRepository checks that the files built into the command are the repository's originals,
// byte for byte: Kev's serving benchmark cases (package kevtest checks its copy of the tiny-a checkpoint).
func TestBundledMatchesRepository(t *testing.T) {
	pairs := map[string]string{
		bundledCases: filepath.Join("..", "..", "scripts", "golden", "bench-cases.json"),
	}
	for emb, orig := range pairs {
		emb = path.Join(bundledDir, emb)
		st, err := os.Stat(orig)
		if err != nil {
			t.Fatal(err)
		}
		if !st.IsDir() {
			compareEmbedded(t, emb, orig)
			continue
		}
		entries, err := os.ReadDir(orig)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, e := range entries {
			want = append(want, e.Name())
			compareEmbedded(t, path.Join(emb, e.Name()), filepath.Join(orig, e.Name()))
		}
		embEntries, err := fs.ReadDir(bundled, emb)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range embEntries {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %q, the repository's %s %q", emb, got, orig, want)
		}
	}
}

func compareEmbedded(t *testing.T, emb, orig string) {
	t.Helper()
	want, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bundled.ReadFile(emb)
	if err != nil {
		t.Errorf("%s is not built in: %v", orig, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the built-in %s differs from %s: copy it again (cp %s examples/kev/%s)", emb, orig, orig, emb)
	}
}

// TestAskOutsideRepository runs kev ask with no flags from a directory outside the repository, as a go install-ed
// binary runs: the built-in checkpoint answers, the note lists the choices, and its temporary copy is removed.
func TestAskOutsideRepository(t *testing.T) {
	req, err := os.ReadFile(filepath.Join("testdata", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Chdir(t.TempDir())
	code, out, errOut := runCmd(t, string(req), "ask")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if !strings.HasPrefix(out, `{"model":"kev-latest","answers":{"billing":{"type":"noul","noul":`) {
		t.Errorf("output %q", out)
	}
	for _, s := range []string{"no checkpoint given", "meaningless", "-checkpoint DIR", "-checkpoint org/name[@revision]", "head.pt", "KEV_RUN"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errOut)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the unpacked checkpoint was left in %s: %v", tmp, left)
	}

	code, out, errOut = runCmd(t, string(req), "ask", "-checkpoint", "kev-checkpoint-that-is-not-here")
	if code != 1 || out != "" || strings.Contains(errOut, "no checkpoint given") {
		t.Errorf("a missing checkpoint: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestErrorPrefix checks that a failing command names itself once: "kev ask: load ...", not "kev ask: kev: load".
func TestErrorPrefix(t *testing.T) {
	code, _, errOut := runCmd(t, `{"state": "x", "questions": {"q": {"type": "noul"}}}`, "ask", "-checkpoint", t.TempDir())
	if code != 1 || !strings.HasPrefix(errOut, "kev ask: ") || strings.HasPrefix(errOut, "kev ask: kev: ") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		code, out, errOut := runCmd(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, "kev ") || !strings.Contains(out, runtime.Version()) ||
			!strings.Contains(out, "backends  cpu; cuda: no (build with -tags cuda)") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, _ := runCmd(t, "", "version", "-json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Go == "" || v.CUDA || !slices.Contains(v.Backends, "cpu") {
		t.Errorf("-json: exit %d, %v, %q", code, err, out)
	}

	modified := true
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/kevgo/kev", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"}, {Key: "-tags", Value: "cuda"}}}
	got := versionOf(bi, true)
	want := buildVersion{Version: "v1.2.3", Module: "github.com/kevgo/kev", Revision: "0123abcd", Time: "2026-12-01T12:00:00Z",
		Modified: &modified, Go: "go1.99.1", Platform: runtime.GOOS + "/" + runtime.GOARCH, Backends: got.Backends, Tags: "cuda"}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Errorf("versionOf: %s, want %s", gj, wj)
	}
	text := got.String()
	for _, s := range []string{"kev v1.2.3\n", "module    github.com/kevgo/kev\n", "revision  0123abcd (with uncommitted changes)\n",
		"time      2026-12-01T12:00:00Z\n", "go        go1.99.1 "} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
	if v := versionOf(nil, false); v.Version != "unknown" || v.Go != runtime.Version() {
		t.Errorf("no build info: %+v", v)
	}
}

var kevVar = regexp.MustCompile(`"(KEV_[A-Z0-9_]+)"`)

// TestServeHelpListsEnvironment checks that serve -h names every KEV_ variable the command's code reads, and the
// valid -device values.
func TestServeHelpListsEnvironment(t *testing.T) {
	code, _, help := runCmd(t, "", "serve", "-h")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	files, _ := filepath.Glob("*.go")
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range kevVar.FindAllSubmatch(src, -1) {
			seen[string(m[1])] = true
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d KEV_ names in the source", len(seen))
	}
	for name := range seen {
		if !strings.Contains(help, "\n  "+name+" ") {
			t.Errorf("serve -h does not list %s:\n%s", name, help)
		}
	}
	for _, s := range []string{"tensor backend: cpu (cuda needs a binary built with -tags cuda)", "-log-format", "-log-level", "HF_HUB_OFFLINE"} {
		if !strings.Contains(help, s) {
			t.Errorf("serve -h lacks %q:\n%s", s, help)
		}
	}
}

func TestServeLogFlags(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"KEV_LOG_FORMAT": "json", "KEV_LOG_LEVEL": "warn"}[k]
	}
	cfg, err := serveConfigFrom(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := cfg.log.logger(&buf)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "shown" || line["level"] != "WARN" {
		t.Errorf("KEV_LOG_FORMAT=json KEV_LOG_LEVEL=warn: %q (%v)", buf.String(), err)
	}

	cfg, err = serveConfigFrom([]string{"-log-format", "text", "-log-level", "debug"}, env)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	cfg.log.logger(&buf).Debug("detail", "k", 2)
	if !strings.HasPrefix(buf.String(), "time=") || !strings.Contains(buf.String(), "level=DEBUG msg=detail k=2") {
		t.Errorf("flags over the environment: %q", buf.String())
	}
	for _, args := range [][]string{{"-log-format", "xml"}, {"-log-level", "loud"}} {
		code, _, errOut := runCmd(t, "", append([]string{"serve"}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestLoadtestFails checks that kev loadtest exits 1 and says why when requests fail or no server answers, and
// prints a table, not the JSON, unless asked.
func TestLoadtestFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Typesafe-Request-Id", "0123456789abcdef0123456789abcdef")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"detail":"not ready"}`))
	}))
	defer srv.Close()
	args := []string{"loadtest", "-url", srv.URL, "-levels", "1,2", "-duration", "50ms", "-bodies", "2", "-warmup", "0"}
	code, out, errOut := runCmd(t, "", args...)
	if code != 1 {
		t.Errorf("exit %d at 100%% errors", code)
	}
	for _, s := range []string{"clients", "requests", "errors", "p50 ms", `HTTP 503: {"detail":"not ready"}`, "invalid body → 503 FAILED"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "{Concurrency:") || strings.Contains(errOut, "{Concurrency:") {
		t.Errorf("Go struct dump in the output:\n%s\n%s", out, errOut)
	}
	if !strings.HasPrefix(errOut, "kev loadtest: ") || !strings.Contains(errOut, "requests failed at concurrency 1") ||
		!strings.Contains(errOut, "an invalid body got 503, want 422") {
		t.Errorf("stderr %q", errOut)
	}

	code, out, _ = runCmd(t, "", append(args, "-json")...)
	var rep struct {
		Levels []struct {
			Errors     int    `json:"errors"`
			FirstError string `json:"first_error"`
		} `json:"levels"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 1 || err != nil || len(rep.Levels) != 2 || rep.Levels[0].Errors == 0 ||
		!strings.HasPrefix(rep.Levels[0].FirstError, "HTTP 503") {
		t.Errorf("-json: exit %d, %v, %s", code, err, out)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	code, _, errOut = runCmd(t, "", "loadtest", "-url", closed, "-levels", "1", "-duration", "50ms", "-warmup", "0")
	if code != 1 || !strings.Contains(errOut, "no System One server answers at "+closed) {
		t.Errorf("no server: exit %d, stderr %q", code, errOut)
	}

	code, _, errOut = runCmd(t, "", "loadtest", "-url", srv.URL, "-case", "nine questions")
	if code != 1 || !strings.Contains(errOut, `case "nine questions": no such case (it has "2 questions, short state"`) {
		t.Errorf("unknown case: exit %d, stderr %q", code, errOut)
	}
}

// TestBundledName checks that the bundled checkpoint shows under its name, not its temporary directory, in the
// model card (/v1/models' run, kev_model_info's label).
func TestBundledName(t *testing.T) {
	m, err := loadModel(context.Background(), "", kev.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if run := m.Info().Run; run != bundledName {
		t.Errorf("Info().Run = %q, want %q", run, bundledName)
	}
}
