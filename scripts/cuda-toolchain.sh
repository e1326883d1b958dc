#!/usr/bin/env bash
# Installs what building kev with -tags cuda needs on a Linux x86-64 machine, with or without a GPU: the CUDA 12.x
# headers (cuda.h, cuda_bf16.h, ...), the libcuda stub to link cgo programs against, and nvcc 12.x (only needed to
# regenerate the committed PTX with `go generate ./tensor/cuda/`). Run it as root (or with sudo).
#
#   bash scripts/cuda-toolchain.sh            # install if missing, then print the build environment
#   bash scripts/cuda-toolchain.sh --check    # only report what is there
#
# It picks the first source that works:
#   1. a toolkit already installed (nvcc 12.x plus cuda.h under /usr/local/cuda or /usr/include);
#   2. NVIDIA's CUDA apt repository, when the machine has it configured (NVIDIA's CUDA installation guide, network
#      repository): the packages cuda-nvcc-12-4, cuda-cudart-dev-12-4 and cuda-driver-dev-12-4 (the last holds
#      cuda.h and the stub libcuda.so), into /usr/local/cuda-12.4;
#   3. Debian's own packages (nvidia-cuda-toolkit, nvidia-cuda-dev, libcu++-dev from the non-free component of the
#      release after bookworm, whose CUDA is 12.4), fetched through a private apt list under
#      /var/cache/kev-cuda-toolchain and unpacked into / without changing the system's apt sources or dpkg state.
# Afterwards it prints the CGO_CFLAGS and CGO_LDFLAGS that `go build -tags cuda` needs here.
set -euo pipefail

want_major=12
check_only=false
[ "${1:-}" = "--check" ] && check_only=true

# cuda_include prints the directory holding cuda.h, if any.
cuda_include() {
  local d
  for d in /usr/local/cuda/include /usr/local/cuda-12*/include /usr/include; do
    [ -f "$d/cuda.h" ] && { echo "$d"; return 0; }
  done
  return 1
}

# cuda_stub prints the directory holding the libcuda.so stub (or the driver's libcuda.so), if any.
cuda_stub() {
  local d
  for d in /usr/local/cuda/lib64/stubs /usr/local/cuda-12*/lib64/stubs /usr/lib/x86_64-linux-gnu/stubs /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libcuda.so" ] && { echo "$d"; return 0; }
  done
  return 1
}

have_nvcc() {
  local n
  for n in nvcc /usr/local/cuda/bin/nvcc; do
    command -v "$n" >/dev/null 2>&1 && "$n" --version | grep -q "release $want_major\." && return 0
  done
  return 1
}

complete() { cuda_include >/dev/null && cuda_stub >/dev/null && have_nvcc; }

report() {
  local inc stub
  inc=$(cuda_include || true)
  stub=$(cuda_stub || true)
  echo "cuda.h:      ${inc:-missing}"
  echo "libcuda.so:  ${stub:-missing}"
  if have_nvcc; then echo "nvcc:        $( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) | head -1) ($( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version) | grep -o 'release [0-9.]*'))"
  else echo "nvcc:        missing (only needed for go generate ./tensor/cuda/)"; fi
  if [ -n "$inc" ] && [ -n "$stub" ]; then
    grep -m1 "define CUDA_VERSION" "$inc/cuda.h" | sed 's/^#define /header:      /'
    echo
    echo "Build with:"
    echo "  export CGO_CFLAGS=-I$inc CGO_LDFLAGS=-L$stub"
    echo "  go build -tags cuda ./examples/kev"
  fi
}

if $check_only || complete; then
  report
  complete
  exit $?
fi

[ "$(id -u)" = 0 ] || { echo "cuda-toolchain.sh: run as root to install (or pass --check)" >&2; exit 1; }

if command -v apt-cache >/dev/null && apt-cache show cuda-driver-dev-12-4 >/dev/null 2>&1; then
  echo "== NVIDIA's CUDA repository"
  apt-get install -y --no-install-recommends cuda-nvcc-12-4 cuda-cudart-dev-12-4 cuda-driver-dev-12-4
  [ -e /usr/local/cuda ] || ln -s /usr/local/cuda-12.4 /usr/local/cuda
elif [ -f /etc/debian_version ]; then
  echo "== Debian's CUDA 12.4 packages (non-free), unpacked without touching the system's apt state"
  work=/var/cache/kev-cuda-toolchain
  mkdir -p "$work/lists/partial" "$work/debs"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || { echo "cuda-toolchain.sh: no Debian mirror configured" >&2; exit 1; }
  echo "deb $mirror trixie main contrib non-free" > "$work/sources.list"
  apt_private=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
  apt-get -qq "${apt_private[@]}" update
  (cd "$work/debs" && apt-get -qq "${apt_private[@]}" download nvidia-cuda-toolkit libnvvm4 nvidia-cuda-dev libcu++-dev)
  for pkg in nvidia-cuda-toolkit libnvvm4 libcu++-dev; do
    dpkg -x "$(ls "$work/debs/${pkg}"_*.deb | tail -1)" /
  done
  # Only the headers and the link stub from the development package: its runtime libraries would shadow a driver's.
  dpkg --fsys-tarfile "$(ls "$work/debs"/nvidia-cuda-dev_*.deb | tail -1)" |
    tar -x -C / ./usr/include ./usr/lib/x86_64-linux-gnu/stubs
else
  echo "cuda-toolchain.sh: install the CUDA 12.x toolkit for this system (NVIDIA's CUDA installation guide)," >&2
  echo "then run this again to print the build environment" >&2
  exit 1
fi
report
complete
