package hub

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kevgo/kev/internal/quote"
)

// Sentinel errors, matched with errors.Is against the typed errors below.
var (
	// ErrRepoNotFound means the Hub has no such repository, or it is private and
	// the token (if any) gives no access to it.
	ErrRepoNotFound = errors.New("hub: repository not found")
	// ErrRevisionNotFound means the repository has no such branch, tag or commit.
	ErrRevisionNotFound = errors.New("hub: revision not found")
	// ErrEntryNotFound means the revision has no such file.
	ErrEntryNotFound = errors.New("hub: file not found")
	// ErrUnauthorized means the Hub refused the request for lack of (valid)
	// credentials or access rights (HTTP 401 or 403, gated repositories).
	ErrUnauthorized = errors.New("hub: unauthorized")
	// ErrNotCached means the cache lacks what was asked and the network may
	// not be used.
	ErrNotCached = errors.New("hub: not in the cache")
)

// NameError reports a repository id, revision, file name or setting that is
// refused before it can reach the file system or a URL.
type NameError struct {
	Field  string // "repo id", "revision", "file name", "endpoint", ...
	Value  string // the value as given
	Reason string // what is wrong with it
	Source string // where the value came from, when not from the caller
}

// Error describes the refused value and why.
func (e *NameError) Error() string {
	s := fmt.Sprintf("hub: bad %s %s: %s", e.Field, quote.Name(e.Value), e.Reason)
	if e.Source != "" {
		s += " (in " + e.Source + ")"
	}
	return s
}

// HTTPError reports a request the Hub answered with an error status.
type HTTPError struct {
	Method     string
	URL        string
	StatusCode int
	Code       string // the Hub's X-Error-Code header, e.g. "RepoNotFound"
	Message    string // the Hub's X-Error-Message header or JSON "error"
	Repo       string
	Revision   string
	File       string // "" for the model info request
}

// Error names the request, the status and the Hub's explanation, with a hint.
func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub: %s %s: %d %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Code != "" || e.Message != "" {
		b.WriteString(" (")
		b.WriteString(e.Code)
		if e.Code != "" && e.Message != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
		b.WriteString(")")
	}
	switch {
	case errors.Is(e, ErrUnauthorized):
		fmt.Fprintf(&b, "; for a private or gated repository set HF_TOKEN to a token with access to %s", e.Repo)
	case errors.Is(e, ErrRepoNotFound):
		fmt.Fprintf(&b, "; check the repository id %q", e.Repo)
	case errors.Is(e, ErrRevisionNotFound):
		fmt.Fprintf(&b, "; %s has no revision %q", e.Repo, e.Revision)
	}
	return b.String()
}

// Is matches the sentinel errors of this package, following the Hub's error
// codes and, without one, the status.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden || e.Code == "GatedRepo"
	case ErrRepoNotFound:
		return e.Code == "RepoNotFound" || (e.Code == "" && e.File == "" && e.StatusCode == http.StatusNotFound)
	case ErrRevisionNotFound:
		return e.Code == "RevisionNotFound"
	case ErrEntryNotFound:
		return e.Code == "EntryNotFound" || (e.Code == "" && e.File != "" && e.StatusCode == http.StatusNotFound)
	}
	return false
}

// NotCachedError reports a revision that the cache cannot serve while the
// network may not be used (offline mode), naming what is missing.
type NotCachedError struct {
	Repo     string
	Revision string
	Commit   string   // "" when the revision could not be mapped to a commit
	CacheDir string   // the repository's folder in the cache
	Missing  []string // files or cache entries that are missing
	Offline  bool     // the lookup was made in offline mode
}

// Error names the revision, the cache folder and what is missing.
func (e *NotCachedError) Error() string {
	s := fmt.Sprintf("hub: %s@%s is not complete in the cache %s: missing %s", e.Repo, e.Revision, e.CacheDir,
		strings.Join(e.Missing, ", "))
	if e.Offline {
		s += " (offline mode: HF_HUB_OFFLINE is set or Options.Offline is true)"
	}
	return s
}

// Is reports whether target is ErrNotCached.
func (e *NotCachedError) Is(target error) bool { return target == ErrNotCached }

// IntegrityError reports a downloaded file whose size or SHA-256 does not
// match what the Hub announced. The file is removed from the cache.
type IntegrityError struct {
	Repo  string
	File  string
	Check string // "sha256" or "size"
	Want  string
	Got   string
}

// Error names the file and the failed check.
func (e *IntegrityError) Error() string {
	return fmt.Sprintf("hub: %s: downloaded %s failed the %s check: want %s, got %s; the partial file was removed",
		e.Repo, e.File, e.Check, e.Want, e.Got)
}

// OutsideCacheError reports a cached snapshot holding a file or folder that
// resolves, through a symbolic link, to a path outside the cache. Such a
// snapshot is refused: a Hub name must never make a loader read local files.
type OutsideCacheError struct {
	Snapshot string // the snapshot folder
	File     string // the file or folder in it, slash-separated ("." for the folder itself)
	Target   string // where it resolves
	CacheDir string
}

// Error names the file, where it leads and the cache it leaves.
func (e *OutsideCacheError) Error() string {
	return fmt.Sprintf("hub: %s: %s resolves to %s, outside the cache %s; refusing the snapshot",
		e.Snapshot, quote.Name(e.File), quote.Name(e.Target), e.CacheDir)
}

// ProtocolError reports a Hub answer that cannot be used: a missing or
// malformed commit, etag or size.
type ProtocolError struct {
	URL    string
	Reason string
}

// Error names the URL and what was unusable.
func (e *ProtocolError) Error() string { return fmt.Sprintf("hub: %s: %s", e.URL, e.Reason) }
