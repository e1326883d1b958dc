// Package hub resolves a model name such as "jaredpalmer/kev-4b@main" to a
// directory of checkpoint files, reusing and filling the Hugging Face cache.
//
// A name is either a local directory, which is used as is and never touches
// the network, or a Hub repository id with an optional revision (a branch, a
// tag or a 40-hex commit) after "@". Repository files live in the cache layout
// of the Python huggingface_hub library, so that files fetched by Python are
// reused here and files fetched here are reused by Python:
//
//	<cache>/models--<org>--<name>/
//	    refs/<revision>                      the commit a branch or tag points at (no newline)
//	    snapshots/<commit>/<file>            relative symlink to ../../blobs/<etag>
//	    blobs/<etag>                         file content; <etag>.incomplete while it downloads
//	<cache>/.locks/models--<org>--<name>/<etag>.lock
//
// The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
//
// Resolution is cache first: a revision whose snapshot in the cache is
// complete is used without any request, so a machine that has the files needs
// no network. Otherwise the Hub's HTTP API is asked for the revision's commit
// and file list, the files matching [Options.AllowPatterns] are fetched in
// parallel (interrupted transfers resume with an HTTP Range request, large
// files are checked against their SHA-256 etag) and moved into the cache
// atomically. With HF_HUB_OFFLINE=1 (or [Options.Offline]) only the cache is
// read, and a missing revision or file is reported by name.
//
// Names are checked before they reach the file system: path traversal in a
// repository id, a revision or a file list sent by the server is refused with
// a [*NameError]. A cached snapshot whose files or folders resolve outside the
// cache through symbolic links is refused with an [*OutsideCacheError], and
// [Options.HubOnly] keeps a name read from a downloaded file (a checkpoint's
// base model) from naming a local directory. Whatever a server or the cache
// sends appears in errors only cut to a short prefix.
package hub
