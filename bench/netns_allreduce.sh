#!/usr/bin/env bash
# All-reduce times over a rate-limited link between two network namespaces (bench/netns_link.sh): runs
# bench/backend_allreduce_bench (ProcessGroupGloo) with one rank in each namespace, and prints rank 0's table.
#
#   bazel run //bench:netns_allreduce -- [--rate=1gbit] [--realtime] [--one_core] [-- BENCH_FLAGS...]
#
# --realtime runs both ranks under chrt -f 5 (as bench/validate_sim.sh does); --one_core pins both ranks to core 0
# (taskset -c 0): with --realtime, what Note [Simulated schedule] step 6 (sim/step_simulator.h) calls the
# shared-core link, where one core runs every rank's communication. BENCH_FLAGS go to the benchmark (e.g.
# --bytes=65536,1048576 --target_ms=300). Needs root and iproute2.
set -euo pipefail

runfile() {
  local path="$1"
  for base in "${RUNFILES_DIR:-}" "$0.runfiles" "${TEST_SRCDIR:-}"; do
    if [[ -n "$base" && -e "$base/ddpengine/$path" ]]; then echo "$base/ddpengine/$path"; return; fi
  done
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  if [[ -e "$root/bazel-bin/$path" ]]; then echo "$root/bazel-bin/$path"; else echo "$root/$path"; fi
}

RATE=1gbit PREFIX=() BENCH_FLAGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate=*) RATE="${1#*=}" ;;
    --realtime) PREFIX+=(chrt -f 5) ;;
    --one_core) PREFIX+=(taskset -c 0) ;;
    --) shift; BENCH_FLAGS=("$@"); break ;;
    *) echo "netns_allreduce: unknown argument $1 (see the header of bench/netns_allreduce.sh)" >&2; exit 2 ;;
  esac
  shift
done

source "$(runfile bench/netns_link.sh)"
trap netns_link_down EXIT
netns_link_up "$RATE" || { echo "netns_allreduce: could not set up the $RATE link" >&2; exit 2; }
echo "# link $RATE between two network namespaces; ranks started through: ${PREFIX[*]:-(nothing)}"
netns_run_pair "$(runfile launch/ddprun)" "${PREFIX[@]}" -- "$(runfile bench/backend_allreduce_bench)" \
  --backend=gloo "${BENCH_FLAGS[@]}" | sed -n 's/^\[rank 0\] //p'
