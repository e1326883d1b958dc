"""Checks with huggingface_hub itself that a cache written by the Go package is
one Python reads as its own. Run by TestPythonReadsOurCache when
KEV_HUB_PYTHON names a Python with huggingface_hub installed.

usage: python_reads_cache.py CACHE_DIR REPO COMMIT FILE...
"""
import os
import sys

from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache

cache, repo, commit, *files = sys.argv[1:]
snap = snapshot_download(repo, cache_dir=cache, local_files_only=True)
assert os.path.basename(snap) == commit, snap
pinned = snapshot_download(repo, revision=commit, cache_dir=cache, local_files_only=True)
assert pinned == snap, (pinned, snap)
for f in files:
    p = try_to_load_from_cache(repo, f, cache_dir=cache)
    assert p == os.path.join(snap, f), (f, p)
    assert os.path.islink(p) and not os.path.isabs(os.readlink(p)), p
info = scan_cache_dir(cache)
assert not info.warnings, info.warnings
(entry,) = [r for r in info.repos if r.repo_id == repo]
(rev,) = list(entry.revisions)
assert rev.commit_hash == commit and "main" in rev.refs, rev
assert sorted(f.file_name for f in rev.files) == sorted(os.path.basename(f) for f in files), rev.files
print("ok", len(files))
