#!/usr/bin/env bash
# What a newer oneDNN would give the engine's convolutions on this CPU (BENCHMARKS.md "Convolution
# kernels"): conv_passes.cc built twice, against Debian's oneDNN (the one the engine links) and against
# oneDNN 3.2 from PyPI's onednn-cpu-gomp / onednn-devel-cpu-gomp 2023.2.0 wheels (GNU OpenMP, no other
# runtime; downloaded outside the repo: the engine does not link them), each run pinned to one core with one
# thread: bf16 and float32 direct primitives, and float32 Winograd. Prints the CPU model and flags first.
#
#   bash bench/onednn_probe/run.sh [--core=1] [--wheels=/tmp/onednn_probe_wheels]
#
# Run it under `chrt -f 5` on a busy machine. Needs g++, libdnnl-dev and access to PyPI (the 3.2 part is
# skipped, saying so, when pip cannot download the wheels).
set -uo pipefail
CORE=1 WHEELS=/tmp/onednn_probe_wheels
for arg in "$@"; do
  case "$arg" in
    --core=*) CORE="${arg#*=}" ;;
    --wheels=*) WHEELS="${arg#*=}" ;;
    *) echo "onednn_probe: unknown argument $arg (flags: --core=N --wheels=DIR)" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/probe_env.sh
source "$HERE/../probe_env.sh"
export OMP_NUM_THREADS=1

print_cpu 'amx[a-z_0-9]*|avx512_bf16|avx512f '

run_all() {  # $1: the binary
  taskset -c "$CORE" "$1" bf16 direct
  taskset -c "$CORE" "$1" f32 direct
  taskset -c "$CORE" "$1" f32 winograd
}

g++ -O2 -std=c++17 -o "$BUILD/conv_passes_debian" "$HERE/conv_passes.cc" -ldnnl || exit 1
run_all "$BUILD/conv_passes_debian"

if [[ ! -d "$WHEELS/x" ]]; then
  mkdir -p "$WHEELS"
  if timeout 600 pip download -q --no-deps -d "$WHEELS" onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 \
    > "$BUILD/pip.log" 2>&1; then
    mkdir -p "$WHEELS/x" && for w in "$WHEELS"/*.whl; do unzip -q -o "$w" -d "$WHEELS/x"; done
  else
    echo "onednn_probe: could not download oneDNN 3.2 from PyPI (pip's output below); skipped" >&2
    cat "$BUILD/pip.log" >&2
    exit 0
  fi
fi
include="$(dirname "$(dirname "$(find "$WHEELS/x" -path '*include/oneapi/dnnl/dnnl.hpp' | head -1)")")"
lib="$(dirname "$(find "$WHEELS/x" -name 'libdnnl.so.3' | head -1)")"
g++ -O2 -std=c++17 -o "$BUILD/conv_passes_pypi" "$HERE/conv_passes.cc" -I"$include/.." -L"$lib" -l:libdnnl.so.3 \
  -Wl,-rpath,"$lib" || exit 1
run_all "$BUILD/conv_passes_pypi"
