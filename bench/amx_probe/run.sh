#!/usr/bin/env bash
# Whether oneDNN's AMX matmul (the convolutions' forward and weight-gradient GEMMs) and its AMX backward-data
# and backward-weights convolutions sum in the orders plain AMX kernels would (bench/amx_probe/sum_order.cc,
# wgrad_order.cc, bwd_data_order.cc, bwd_weights_order.cc; BENCHMARKS.md "bf16 mixed precision"): builds the probes against Debian's oneDNN (the
# one the engine links) and runs them pinned to one core with one thread. Prints the CPU model and flags
# first; on a CPU without AMX it says so and stops.
#
#   bash bench/amx_probe/run.sh [--core=1]
set -uo pipefail
CORE=1
for arg in "$@"; do
  case "$arg" in
    --core=*) CORE="${arg#*=}" ;;
    *) echo "amx_probe: unknown argument $arg (flags: --core=N)" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/probe_env.sh
source "$HERE/../probe_env.sh"
export OMP_NUM_THREADS=1

print_cpu 'amx[a-z_0-9]*|avx512_bf16'
if ! grep -q -w amx_tile /proc/cpuinfo; then
  echo "amx_probe: this CPU has no AMX; nothing to compare"
  exit 0
fi
for probe in sum_order bwd_data_order wgrad_order bwd_weights_order; do
  g++ -O2 -std=c++17 -o "$BUILD/$probe" "$HERE/$probe.cc" -ldnnl || exit 1
  taskset -c "$CORE" "$BUILD/$probe" || exit 1
done
