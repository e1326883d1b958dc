package hub

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name, repo, rev, folder string
	}{
		{"jaredpalmer/kev-4b", "jaredpalmer/kev-4b", "main", "models--jaredpalmer--kev-4b"},
		{"Qwen/Qwen3.5-4B-Base@1001bb4d826a52d1f399e183466143f4da7b741b", "Qwen/Qwen3.5-4B-Base",
			"1001bb4d826a52d1f399e183466143f4da7b741b", "models--Qwen--Qwen3.5-4B-Base"},
		{"gpt2", "gpt2", "main", "models--gpt2"},
		{"acme/kev@v1.0", "acme/kev", "v1.0", "models--acme--kev"},
		{"acme/kev@refs/pr/12", "acme/kev", "refs/pr/12", "models--acme--kev"},
		{"a_b/c.d@feature_x-2", "a_b/c.d", "feature_x-2", "models--a_b--c.d"},
	} {
		ref, err := ParseName(tc.name)
		if err != nil {
			t.Errorf("%q: %v", tc.name, err)
			continue
		}
		if ref.Repo != tc.repo || ref.Revision != tc.rev || ref.CacheFolder() != tc.folder {
			t.Errorf("%q = %+v (%s)", tc.name, ref, ref.CacheFolder())
		}
		if ref.String() != tc.repo+"@"+tc.rev {
			t.Errorf("%q: String() = %q", tc.name, ref.String())
		}
	}
}

func TestParseNameRefusals(t *testing.T) {
	for _, tc := range []struct{ name, field, reason string }{
		{"../x", "repo id", "'..'"},
		{"/abs/x", "repo id", "absolute"},
		{`a\b`, "repo id", "backslash"},
		{"a/b@../c", "revision", "'..'"},
		{"a/b@x/../../c", "revision", "'..'"},
		{"a/b@/etc", "revision", "starts with '/'"},
		{`a/b@x\y`, "revision", "backslash"},
		{"a/b@", "revision", "empty"},
		{"a--b/c", "repo id", "'--'"},
		{"a/b/c", "repo id", "more than one"},
		{"a/" + strings.Repeat("x", 97), "repo id", "longer than 96"},
		{"a/b@" + strings.Repeat("x", 256), "revision", "longer than 255"},
	} {
		_, err := ParseName(tc.name)
		var ne *NameError
		if !errors.As(err, &ne) || ne.Field != tc.field || !strings.Contains(ne.Reason, tc.reason) {
			t.Errorf("%q: err = %v, want %s: %s", tc.name, err, tc.field, tc.reason)
		}
	}
}

func TestIsCommit(t *testing.T) {
	for s, want := range map[string]bool{
		"1001bb4d826a52d1f399e183466143f4da7b741b": true,
		"1001BB4D826A52D1F399E183466143F4DA7B741B": false,
		"1001bb4d": false,
		"main":     false,
		"1001bb4d826a52d1f399e183466143f4da7b741g": false,
	} {
		if IsCommit(s) != want {
			t.Errorf("IsCommit(%q) = %v", s, !want)
		}
	}
}

func TestNormalizeEtag(t *testing.T) {
	for in, want := range map[string]string{
		`"abc"`: "abc", `W/"abc"`: "abc", `abc`: "abc", ` "abc" `: "abc",
	} {
		if got := normalizeEtag(in); got != want {
			t.Errorf("normalizeEtag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultCacheDir(t *testing.T) {
	cleanEnv(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("HF_HOME", "")
	if got, want := DefaultCacheDir(), filepath.Join(home, ".cache", "huggingface", "hub"); got != want {
		t.Errorf("default = %s, want %s", got, want)
	}
	t.Setenv("XDG_CACHE_HOME", "/x")
	if got := DefaultCacheDir(); got != "/x/huggingface/hub" {
		t.Errorf("XDG_CACHE_HOME: %s", got)
	}
	t.Setenv("HF_HOME", "~/hf")
	if got, want := DefaultCacheDir(), filepath.Join(home, "hf", "hub"); got != want {
		t.Errorf("HF_HOME: %s, want %s", got, want)
	}
	t.Setenv("HF_HUB_CACHE", "/c")
	if got := DefaultCacheDir(); got != "/c" {
		t.Errorf("HF_HUB_CACHE: %s", got)
	}
}

func TestOfflineEnvValues(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "ON": true, "yes": true, "True": true, "0": false, "": false, "no": false} {
		t.Setenv("HF_HUB_OFFLINE", v)
		if got := envTrue("HF_HUB_OFFLINE"); got != want {
			t.Errorf("HF_HUB_OFFLINE=%q: %v", v, got)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.json", "config.json", true},
		{"*.json", "sub/dir/config.json", true}, // '*' crosses '/', as in fnmatch
		{"*.json", "config.json.bak", false},
		{"*.pt", "head.pt", true},
		{"*.safetensors", "model-00001-of-00002.safetensors", true},
		{"*.txt", "README.md", false},
		{"model-0000?-of-00002.safetensors", "model-00001-of-00002.safetensors", true},
		{"model-[0-9]*.safetensors", "model-1.safetensors", true},
		{"model-[!0-9]*.safetensors", "model-1.safetensors", false},
		{"model-[!0-9]*.safetensors", "model-x.safetensors", true},
		{"sub/", "sub/a.bin", true},
		{"sub/", "other/a.bin", false},
		{"[", "[", true},
		{"a[b", "a[b", true},
		{"[]]", "]", true},
		{"*", "", true},
		{"", "", true},
		{"", "a", false},
		{"*a*b*c", "xaybzc", true},
		{"*a*b*c", "xaybz", false},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	if !MatchAny(KevPatterns, "chat_template.jinja") || MatchAny(KevPatterns, "train.log") {
		t.Error("KevPatterns")
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"jaredpalmer/kev-4b", "a/b@main", "../x", "a/b@../c", "a/b@refs/pr/1", "/abs", `a\b`,
		"a/b@" + strings.Repeat("0", 40), "x@y@z", "a--b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ref, err := ParseName(name)
		if err != nil {
			var ne *NameError
			if !errors.As(err, &ne) {
				t.Fatalf("%q: untyped error %v", name, err)
			}
			return
		}
		// Whatever is accepted stays inside the cache folder.
		folder := ref.CacheFolder()
		if strings.ContainsAny(folder, `/\`) || strings.Contains(folder, "..") {
			t.Fatalf("%q: cache folder %q", name, folder)
		}
		root := filepath.Join("/cache", folder)
		p := newRepoCache("/cache", ref).refPath(ref.Revision)
		if !strings.HasPrefix(p, root+string(filepath.Separator)+"refs"+string(filepath.Separator)) {
			t.Fatalf("%q: ref path %q escapes %q", name, p, root)
		}
		if ref2, err := ParseName(ref.String()); err != nil || ref2 != ref {
			t.Fatalf("%q: round trip %+v, %v", name, ref2, err)
		}
	})
}

func FuzzCheckFileName(f *testing.F) {
	for _, s := range []string{"head.pt", "sub/a.json", "../../etc/passwd", "/etc/passwd", `a\b`, "a/./b", "C:/x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if checkFileName(name, "fuzz") != nil {
			return
		}
		root := filepath.FromSlash("/cache/snapshots/c")
		p := filepath.Join(root, filepath.FromSlash(name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("%q escapes the snapshot: %q", name, p)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("*.json", "a/b.json")
	f.Add("[!a-c]?*", "d12")
	f.Add("[", "[")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		Match(pattern, name) // must not panic
		if !strings.ContainsAny(pattern, "*?[") && Match(pattern, name) != (pattern == name) && !strings.HasSuffix(pattern, "/") {
			t.Fatalf("literal pattern %q vs %q", pattern, name)
		}
	})
}

func FuzzEtagHeader(f *testing.F) {
	for _, s := range []string{`"abc"`, `W/"` + strings.Repeat("a", 64) + `"`, `"../../x"`, `""`, `"a/b"`, `W/`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		etag := normalizeEtag(header)
		if checkEtag(etag, "u") != nil {
			return
		}
		blobs := filepath.FromSlash("/cache/m/blobs")
		p := newRepoCache("/cache", Ref{Repo: "m"}).blobPath(etag)
		if filepath.Dir(p) != filepath.Join("/cache", "models--m", "blobs") || filepath.Base(p) != etag || etag == "." {
			t.Fatalf("etag %q names %q outside %s", etag, p, blobs)
		}
	})
}
