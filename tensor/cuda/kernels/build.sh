#!/usr/bin/env bash
# Compiles every kernel source in this directory to PTX (run by `go generate ./tensor/cuda/`; needs nvcc 12.x), or
# only the sources named as arguments (build.sh nn.cu segs.cu).
#   NAME.cu        -> NAME.sm80.ptx   (-arch=compute_80: every Ampere-or-newer GPU, JIT-compiled by the driver)
#                     NAME.sm90.ptx   (-arch=compute_90: Hopper, with programmatic dependent launch, pdl.cuh)
#   NAME_sm90a.cu  -> NAME_sm90a.sm90a.ptx (-arch=sm_90a: Hopper-only instructions such as wgmma and TMA)
# Each PTX begins with one comment line:
#   // kev-ptx source-sha256=<hex> flags=<nvcc flags>
# where the hash covers the .cu, then every *.cuh here in name order, then the flags string. The pure-Go test
# ptx_test.go recomputes it, so a PTX that is stale against its source fails CI.
# Each PTX is then assembled by ptxas into machine code (cubin) for the GPUs the project runs on, so that the driver
# has nothing to compile when a module loads:
#   NAME.sm80.ptx        -> NAME.sm80.sm_80.cubin
#   NAME.sm90.ptx        -> NAME.sm90.sm_90.cubin
#   NAME_sm90a.sm90a.ptx -> NAME_sm90a.sm90a.sm_90a.cubin
# beside each a NAME….cubin.sum text line:
#   kev-cubin ptx-sha256=<hex of the .ptx file> flags=<ptxas flags> cubin-sha256=<hex of the .cubin>
# which ptx_test.go checks against the PTX and the cubin.
set -euo pipefail
cd "$(dirname "$0")"
command -v ptxas >/dev/null || { echo "build.sh: ptxas not found (it comes with nvcc)" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build.sh: nvcc not found (bash scripts/cuda-toolchain.sh installs 12.4)" >&2; exit 1; }
nvcc --version | grep -q "release 12\." || { echo "build.sh: need nvcc 12.x (PTX ISA ≤ 8.x loads on drivers ≥ 550)" >&2; exit 1; }
export LC_ALL=C
headers=$(ls *.cuh 2>/dev/null | sort || true)
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=(*.cu)
for src in "${sources[@]}"; do
  base=${src%.cu}
  case "$base" in
    *_sm90a) targets="sm90a" ;;
    *) targets="sm80 sm90" ;;
  esac
  for target in $targets; do
  case "$target" in
    sm90a) flags="-ptx -arch=sm_90a -O3 -std=c++17" ;;
    sm90) flags="-ptx -arch=compute_90 -O3 -std=c++17" ;;
    *) flags="-ptx -arch=compute_80 -O3 -std=c++17" ;;
  esac
  out="$base.$target.ptx"
  hash=$( { cat "$src"; for h in $headers; do cat "$h"; done; printf '%s' "$flags"; } | sha256sum | cut -d' ' -f1)
  tmp=$(mktemp)
  # shellcheck disable=SC2086
  nvcc $flags -o "$tmp" "$src"
  { printf '// kev-ptx source-sha256=%s flags=%s\n' "$hash" "$flags"; cat "$tmp"; } > "$out"
  rm -f "$tmp"
  echo "build.sh: $src -> $out"
  case "$target" in
    sm90a) archs="sm_90a" ;;
    sm90) archs="sm_90" ;;
    *) archs="sm_80" ;;
  esac
  ptxhash=$(sha256sum "$out" | cut -d' ' -f1)
  for arch in $archs; do
    cubin="$base.$target.$arch.cubin"
    pflags="-arch=$arch -O3"
    # shellcheck disable=SC2086
    ptxas $pflags -o "$cubin" "$out"
    printf 'kev-cubin ptx-sha256=%s flags=%s cubin-sha256=%s\n' "$ptxhash" "$pflags" \
      "$(sha256sum "$cubin" | cut -d' ' -f1)" > "$cubin.sum"
    echo "build.sh: $out -> $cubin"
  done
  done
done
