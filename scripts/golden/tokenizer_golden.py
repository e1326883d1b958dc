#!/usr/bin/env python3
"""Golden token ids for the Go tokenizer, from Hugging Face tokenizers.

    python3 scripts/golden/tokenizer_golden.py TOKENIZER_JSON CORPUS_JSONL OUT_JSONL_GZ

Reads the corpus (JSON lines {"text": ...}; plain, .gz, or .zst when a zstd
module is importable), encodes every chunk with
Tokenizer.from_file(TOKENIZER_JSON).encode(text, add_special_tokens=False).ids
and writes gzip-compressed JSON lines {"ids": [...]} in corpus order. It also
times encoding over the whole corpus (a single-thread encode loop, then
encode_batch) and prints tokens per second.

When the tokenizer splits with the Qwen2/Qwen3 pattern, it encodes the corpus
a second time with the Qwen3.5 pattern put in its place (combining marks join
letters) and writes those ids next to OUT, named *-qwen35split.jsonl.gz.

The uncompressed inputs come from `go run ./scripts/corpus -unpack DIR`.
"""

import gzip
import json
import os
import sys
import time

import tokenizers
from tokenizers import Tokenizer


def read_lines(path):
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read().split("\n")  # not splitlines: U+0085 and U+2028 are not line ends here
    if path.endswith(".zst"):
        try:
            from compression import zstd  # Python 3.14
            data = zstd.decompress(open(path, "rb").read())
        except ImportError:
            import zstandard
            data = zstandard.ZstdDecompressor().stream_reader(open(path, "rb")).read()
        return data.decode("utf-8").split("\n")  # not splitlines: U+0085 and U+2028 are not line ends here
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")  # not splitlines: U+0085 and U+2028 are not line ends here


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                  r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def write_ids(path, ids):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for x in ids:
            f.write(json.dumps({"ids": x}, separators=(",", ":")) + "\n")


def qwen35_variant(tok_path, texts, out_path):
    doc = json.load(open(tok_path, encoding="utf-8"))
    pre = doc.get("pre_tokenizer") or {}
    for p in pre.get("pretokenizers", []):
        if p.get("type") == "Split" and p.get("pattern", {}).get("Regex") == QWEN2_PATTERN:
            p["pattern"]["Regex"] = QWEN35_PATTERN
            break
    else:
        print("no Qwen2/Qwen3 split pattern: no Qwen3.5 variant")
        return
    tok = Tokenizer.from_str(json.dumps(doc))
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    path = out_path.replace(".jsonl.gz", "") + "-qwen35split.jsonl.gz"
    write_ids(path, ids)
    print(f"Qwen3.5 split variant: {sum(len(x) for x in ids)} tokens; wrote {path}")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tok_path, corpus_path, out_path = sys.argv[1:]
    texts = [json.loads(line)["text"] for line in read_lines(corpus_path) if line.strip()]
    tok = Tokenizer.from_file(tok_path)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"tokenizers {tokenizers.__version__}; {len(texts)} chunks, {nbytes} bytes; "
          f"vocab {tok.get_vocab_size(with_added_tokens=True)}")

    t0 = time.perf_counter()
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    first = time.perf_counter() - t0
    ntok = sum(len(x) for x in ids)

    # Timed passes after the first (the BPE word cache is warm).
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    batch = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        out = tok.encode_batch(texts, add_special_tokens=False)
        batch = min(batch, time.perf_counter() - t0)
    assert [e.ids for e in out] == ids, "encode_batch differs from encode"

    write_ids(out_path, ids)

    cpus = os.cpu_count()
    print(f"{ntok} tokens")
    print(f"encode, one thread, first pass: {ntok / first:,.0f} tokens/s")
    print(f"encode, one thread, warm:       {ntok / best:,.0f} tokens/s")
    print(f"encode_batch ({cpus} CPUs), warm: {ntok / batch:,.0f} tokens/s")
    print(f"wrote {out_path}")
    qwen35_variant(tok_path, texts, out_path)


if __name__ == "__main__":
    main()
