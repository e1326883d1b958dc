# Shared by the GPU run scripts (sourced, not run): a run's time budget and its steps.
# The sourcing script sets TOTAL, the seconds the whole run may take; SECONDS counts from the script's start.

# left prints the seconds of the run still to spend.
left() { echo $((TOTAL - SECONDS)); }

# step NAME CAP LOG CMD...: runs CMD with at most CAP seconds (less when the run has less left), its output to LOG;
# prints the exit status and, on failure, the end of LOG.
step() {
  local name=$1 cap=$2 log=$3 lim
  shift 3
  lim=$(left)
  [ "$lim" -gt "$cap" ] && lim=$cap
  if [ "$lim" -lt 5 ]; then echo "== $name: skipped, $(left) s left"; return 124; fi
  local t0=$SECONDS
  timeout -k 3 "$lim" "$@" >"$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s (limit $lim, $(left) s left)"
  [ $rc -ne 0 ] && tail -8 "$log" | sed 's/^/   | /'
  return $rc
}

# unpack_tokenizer FILE writes the Qwen3 tokenizer.json from the tree's zstd copy to FILE (zstd, else python's
# pyarrow), unless FILE is there; nothing is left behind when neither can.
unpack_tokenizer() {
  local f=$1
  [ -f "$f" ] && return 0
  mkdir -p "$(dirname "$f")"
  zstd -dc tokenizer/testdata/qwen3-tokenizer.json.zst >"$f.tmp" 2>/dev/null ||
    python3 -c 'import pyarrow, shutil, sys
with pyarrow.input_stream("tokenizer/testdata/qwen3-tokenizer.json.zst", compression="zstd") as z, open(sys.argv[1], "wb") as f:
    shutil.copyfileobj(z, f)' "$f.tmp" 2>/dev/null
  if [ -s "$f.tmp" ]; then mv "$f.tmp" "$f"; else rm -f "$f.tmp"; return 1; fi
}
