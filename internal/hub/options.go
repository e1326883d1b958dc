package hub

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hub used when neither Options.Endpoint nor
// $HF_ENDPOINT names one.
const DefaultEndpoint = "https://huggingface.co"

// DefaultParallel is the number of files fetched at once by default.
const DefaultParallel = 8

// DefaultRetries is the number of times a cut-off transfer is resumed by
// default before the error is returned.
const DefaultRetries = 3

// Options controls Resolve and Fetch. The zero value reads everything from
// the environment, the way huggingface_hub does.
type Options struct {
	// CacheDir is the hub cache. Default: $HF_HUB_CACHE, else $HF_HOME/hub,
	// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
	CacheDir string
	// Endpoint is the Hub's base URL. Default: $HF_ENDPOINT, else
	// DefaultEndpoint.
	Endpoint string
	// Token is sent as "Authorization: Bearer <token>" to the endpoint, never
	// to the place a file is redirected to (a CDN). Default: $HF_TOKEN, else the token file
	// ($HF_TOKEN_PATH, else $HF_HOME/token), else none.
	Token string
	// Offline reads only the cache. Also on when $HF_HUB_OFFLINE is 1, ON,
	// YES or TRUE.
	Offline bool
	// Update asks the Hub where a branch or tag points now even when the
	// cache has a complete snapshot for it; if the Hub cannot be reached the
	// cached snapshot is used. Commits never change and are never re-checked.
	Update bool
	// Progress receives a one-line progress display while files download.
	// Default: standard error when it is a terminal, else nothing. Set
	// io.Discard to silence it.
	Progress io.Writer
	// HTTPClient makes the requests. Default: http.DefaultClient.
	HTTPClient *http.Client
	// AllowPatterns selects the repository files to fetch (fnmatch patterns,
	// see Match). Default: KevPatterns.
	AllowPatterns []string
	// Required names files a cached snapshot must hold to be complete, in
	// addition to the shards listed by any *.safetensors.index.json in it.
	Required []string
	// Parallel bounds the number of files fetched at once. Default:
	// DefaultParallel.
	Parallel int
	// Retries is how often a cut-off transfer is resumed (HTTP Range)
	// before giving up. 0 means DefaultRetries; negative means never.
	Retries int
	// HubOnly takes the name as a Hub name even when a local directory of
	// that name exists. Set it for names read from files that came from the
	// Hub (a checkpoint's base model), which must never reach into the local
	// file system.
	HubOnly bool
}

// config is Options with every default applied.
type config struct {
	Options
}

func (o Options) withDefaults() (config, error) {
	c := config{Options: o}
	if c.CacheDir == "" {
		c.CacheDir = defaultCacheDir()
	}
	if c.CacheDir == "" {
		return c, &NameError{Field: "cache directory", Value: "", Reason: "no home directory; set HF_HUB_CACHE or HF_HOME"}
	}
	if abs, err := filepath.Abs(expandHome(c.CacheDir)); err == nil {
		c.CacheDir = abs
	}
	if c.Endpoint == "" {
		c.Endpoint = os.Getenv("HF_ENDPOINT")
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return c, &NameError{Field: "endpoint", Value: c.Endpoint, Reason: "want an http or https URL such as " + DefaultEndpoint}
	}
	if c.Token == "" {
		c.Token = defaultToken()
	}
	if !c.Offline {
		c.Offline = envTrue("HF_HUB_OFFLINE")
	}
	if c.Progress == nil {
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			c.Progress = os.Stderr
		}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.AllowPatterns == nil {
		c.AllowPatterns = KevPatterns
	}
	for _, r := range c.Required {
		if err := checkFileName(r, "Options.Required"); err != nil {
			return c, err
		}
	}
	if c.Parallel <= 0 {
		c.Parallel = DefaultParallel
	}
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	return c, nil
}

// DefaultCacheDir returns the hub cache directory named by the environment,
// as huggingface_hub computes it, or "" when there is no home directory.
func DefaultCacheDir() string { return defaultCacheDir() }

func defaultCacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return expandHome(d)
	}
	if d := os.Getenv("HUGGINGFACE_HUB_CACHE"); d != "" {
		return expandHome(d)
	}
	if h := hfHome(); h != "" {
		return filepath.Join(h, "hub")
	}
	return ""
}

func hfHome() string {
	if d := os.Getenv("HF_HOME"); d != "" {
		return expandHome(d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(expandHome(d), "huggingface")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "huggingface")
	}
	return ""
}

func defaultToken() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(k)); t != "" {
			return t
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		if h := hfHome(); h != "" {
			path = filepath.Join(h, "token")
		}
	}
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(expandHome(path))
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func envTrue(key string) bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv(key))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}
