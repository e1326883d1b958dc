package hub

import (
	"strings"

	"github.com/kevgo/kev/internal/quote"
)

// DefaultRevision is the revision used when a name gives none.
const DefaultRevision = "main"

// Ref names one revision of one model repository on the Hub.
type Ref struct {
	Repo     string // "org/name" (or a legacy "name")
	Revision string // a branch, a tag or a 40-hex commit
}

// String returns the name in "repo@revision" form.
func (r Ref) String() string { return r.Repo + "@" + r.Revision }

// CacheFolder returns the repository's folder name in the cache,
// "models--org--name".
func (r Ref) CacheFolder() string { return "models--" + strings.ReplaceAll(r.Repo, "/", "--") }

// ParseName splits "org/name[@revision]" into a Ref, checking both parts.
// It never looks at the file system; see Resolve for local directories.
func ParseName(name string) (Ref, error) {
	repo, rev, hasRev := strings.Cut(name, "@")
	if err := checkRepoID(repo); err != nil {
		return Ref{}, err
	}
	if !hasRev {
		rev = DefaultRevision
	} else if err := checkRevision(rev); err != nil {
		return Ref{}, err
	}
	return Ref{Repo: repo, Revision: rev}, nil
}

// IsCommit reports whether rev is a full commit id: 40 lowercase hex digits.
func IsCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

const maxRepoPart = 96

func checkRepoID(id string) error {
	bad := func(reason string) error { return &NameError{Field: "repo id", Value: id, Reason: reason} }
	switch {
	case id == "":
		return bad("empty")
	case strings.ContainsRune(id, '\\'):
		return bad("contains a backslash")
	case strings.HasPrefix(id, "/"):
		return bad("is an absolute path, not org/name (and no such directory exists)")
	case strings.Contains(id, ".."):
		return bad("contains '..'")
	case strings.Contains(id, "--"):
		return bad("contains '--'")
	case strings.Count(id, "/") > 1:
		return bad("has more than one '/': want org/name")
	}
	for _, part := range strings.Split(id, "/") {
		if part == "" {
			return bad("has an empty part: want org/name")
		}
		if len(part) > maxRepoPart {
			return bad("a part is longer than 96 characters")
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !isWord(c) && c != '-' && c != '.' {
				return bad("contains " + quoteByte(c) + "; only letters, digits, '-', '_' and '.' are allowed")
			}
		}
		if !isWord(part[0]) || !isWord(part[len(part)-1]) {
			return bad("a part starts or ends with '-' or '.'")
		}
	}
	return nil
}

func checkRevision(rev string) error {
	bad := func(reason string) error { return &NameError{Field: "revision", Value: rev, Reason: reason} }
	switch {
	case rev == "":
		return bad("empty")
	case len(rev) > 255:
		return bad("longer than 255 characters")
	case strings.ContainsRune(rev, '\\'):
		return bad("contains a backslash")
	case strings.Contains(rev, ".."):
		return bad("contains '..'")
	case strings.HasPrefix(rev, "/"):
		return bad("starts with '/'")
	case strings.HasSuffix(rev, "/"):
		return bad("ends with '/'")
	}
	for i := 0; i < len(rev); i++ {
		c := rev[i]
		if !isWord(c) && c != '-' && c != '.' && c != '/' && c != '+' && c != '=' {
			return bad("contains " + quoteByte(c))
		}
	}
	for _, part := range strings.Split(rev, "/") {
		if part == "" {
			return bad("has an empty path component")
		}
		if part[0] == '.' {
			return bad("has a path component starting with '.'")
		}
	}
	return nil
}

// checkFileName checks a repository file name (a sibling's rfilename or an
// index's shard name): relative, forward slashes, no "." or ".." components.
func checkFileName(name, source string) error {
	bad := func(reason string) error {
		return &NameError{Field: "file name", Value: name, Reason: reason, Source: source}
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > 1024:
		return bad("longer than 1024 bytes")
	case strings.ContainsRune(name, '\\'):
		return bad("contains a backslash")
	case strings.HasPrefix(name, "/"):
		return bad("is an absolute path")
	case len(name) >= 2 && name[1] == ':' && isLetter(name[0]):
		return bad("starts with a drive letter")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7f {
			return bad("contains a control character")
		}
	}
	for _, part := range strings.Split(name, "/") {
		switch part {
		case "":
			return bad("has an empty path component")
		case ".", "..":
			return bad("has a '" + part + "' path component")
		}
	}
	return nil
}

// checkEtag checks an etag before it names a file in blobs/.
func checkEtag(etag, url string) error {
	if etag == "" || len(etag) > 200 {
		return &ProtocolError{URL: url, Reason: "no usable ETag or X-Linked-Etag header"}
	}
	for i := 0; i < len(etag); i++ {
		c := etag[i]
		if !isWord(c) && c != '-' && (c != '.' || i == 0) {
			return &ProtocolError{URL: url, Reason: "ETag " + quote.String(etag) + " is not a safe file name"}
		}
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isWord(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' || c == '_' }

func quoteByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return "a non-printable or non-ASCII byte"
	}
	return "'" + string(rune(c)) + "'"
}
