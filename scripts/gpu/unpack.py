#!/usr/bin/env python3
"""Unpacks the binaries and inputs built on the Go machine for the GPU machine's scripts (final.sh, verify.sh,
profile.sh, check.sh), from the repository root:

    python3 scripts/gpu/unpack.py [DIR]      (DIR: default .gold-in/c)

DIR holds either bins.tar.xz, one xz-compressed tar of the files (one archive compresses the kernels that every
binary embeds once: about half the size of the files compressed apart), or NAME.gz files, one a file. Executables
go to bin/, tokenizer.json and corpus.jsonl to .gold-in/. When no tokenizer.json came, it is unpacked from the
tree's tokenizer/testdata/qwen3-tokenizer.json.zst (pyarrow reads zstd streams). Prints what it unpacked."""
import gzip
import lzma
import os
import shutil
import sys
import tarfile


def place(name, data_stream):
    """Writes one unpacked file to where the scripts read it."""
    if name.endswith(".json") or name.endswith(".jsonl"):
        dst = os.path.join(".gold-in", name)
    else:
        dst = os.path.join("bin", name)
    with open(dst, "wb") as out:
        shutil.copyfileobj(data_stream, out)
    if dst.startswith("bin"):
        os.chmod(dst, 0o755)
    print("unpack.py:", dst)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else ".gold-in/c"
    os.makedirs("bin", exist_ok=True)
    os.makedirs(".gold-in", exist_ok=True)
    archive = os.path.join(src, "bins.tar.xz")
    if os.path.exists(archive):
        with tarfile.open(fileobj=lzma.open(archive)) as t:
            for m in t.getmembers():
                if m.isfile():
                    place(os.path.basename(m.name), t.extractfile(m))
    elif os.path.isdir(src):
        for f in sorted(os.listdir(src)):
            if f.endswith(".gz"):
                with gzip.open(os.path.join(src, f)) as z:
                    place(f[: -len(".gz")], z)
    else:
        sys.exit("unpack.py: %s: no such folder" % src)
    if not os.path.exists(".gold-in/tokenizer.json"):
        try:
            import pyarrow
        except ImportError:
            sys.exit("unpack.py: no tokenizer.json in %s, and no pyarrow here to unpack the tree's zstd copy: "
                     "put tokenizer.json in the archive" % src)
        with pyarrow.input_stream("tokenizer/testdata/qwen3-tokenizer.json.zst", compression="zstd") as z:
            place("tokenizer.json", z)


if __name__ == "__main__":
    main()
