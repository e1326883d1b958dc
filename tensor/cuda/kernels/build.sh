#!/usr/bin/env bash
# Compiles every kernel source in this directory to PTX (run by `go generate ./tensor/cuda/`; needs nvcc 12.x), or
# only the sources named as arguments (build.sh nn.cu segs.cu).
#   NAME.cu        -> NAME.sm80.ptx   (-arch=compute_80: every Ampere-or-newer GPU, JIT-compiled by the driver)
#   NAME_sm90a.cu  -> NAME_sm90a.sm90a.ptx (-arch=sm_90a: Hopper-only instructions such as wgmma and TMA)
# Each PTX begins with one comment line:
#   // kev-ptx source-sha256=<hex> flags=<nvcc flags>
# where the hash covers the .cu, then every *.cuh here in name order, then the flags string. The pure-Go test
# ptx_test.go recomputes it, so a PTX that is stale against its source fails CI.
set -euo pipefail
cd "$(dirname "$0")"
command -v nvcc >/dev/null || { echo "build.sh: nvcc not found (bash scripts/cuda-toolchain.sh installs 12.4)" >&2; exit 1; }
nvcc --version | grep -q "release 12\." || { echo "build.sh: need nvcc 12.x (PTX ISA ≤ 8.x loads on drivers ≥ 550)" >&2; exit 1; }
export LC_ALL=C
headers=$(ls *.cuh 2>/dev/null | sort || true)
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=(*.cu)
for src in "${sources[@]}"; do
  base=${src%.cu}
  case "$base" in
    *_sm90a) target=sm90a; flags="-ptx -arch=sm_90a -O3 -std=c++17" ;;
    *) target=sm80; flags="-ptx -arch=compute_80 -O3 -std=c++17" ;;
  esac
  out="$base.$target.ptx"
  hash=$( { cat "$src"; for h in $headers; do cat "$h"; done; printf '%s' "$flags"; } | sha256sum | cut -d' ' -f1)
  tmp=$(mktemp)
  # shellcheck disable=SC2086
  nvcc $flags -o "$tmp" "$src"
  { printf '// kev-ptx source-sha256=%s flags=%s\n' "$hash" "$flags"; cat "$tmp"; } > "$out"
  rm -f "$tmp"
  echo "build.sh: $src -> $out"
done
