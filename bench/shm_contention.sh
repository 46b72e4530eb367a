#!/usr/bin/env bash
# 2-rank DDP training throughput over shm and Gloo while N busy processes compete for the CPUs under
# ordinary scheduling (bench/contend.sh; no real-time priority: the point is what a shared node does).
# Runs are interleaved (each round runs every N and every backend once, in a rotating order) so that
# whatever else the machine does hits all alike; prints each run's samples/s, then per N and backend the
# median, the range and the ratio of the median to the same backend's quiet (N=0) median.
#
#   bash bench/shm_contention.sh                       # N = 0 1 2, shm and gloo, mlp, 5 rounds
#   ROUNDS=7 BUSY="0 1" MODEL=cnn bash bench/shm_contention.sh
#   BASE_BIN=/path/to/other/build bash bench/shm_contention.sh
#       # also runs ddprun and train_throughput from that folder ("base" rows), interleaved: an A/B
#   NEW_BIN=/path/to/a/copy bash bench/shm_contention.sh   # the "new" rows from there, not bazel-bin/
#   NPROC=3 bash bench/shm_contention.sh               # 3 ranks
#   QUIET=1 bash bench/shm_contention.sh
#       # on a machine others share: before each round, wait until at most 2 threads are runnable at
#       # three checks 5 s apart (at most QUIET_MAX_S, default 1800 s; the round says if it gave up)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
BUSY=${BUSY:-"0 1 2"}
BACKENDS=${BACKENDS:-"shm gloo"}
MODEL=${MODEL:-mlp}
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-30}
NPROC=${NPROC:-2}
BASE_BIN=${BASE_BIN:-}
NEW_BIN=${NEW_BIN:-}
if [[ -z "${SKIP_BUILD:-}" && -z "$NEW_BIN" ]]; then
  bazel build //launch:ddprun //bench:train_throughput 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
fi
if [[ -n "$NEW_BIN" ]]; then
  builds=("new:$NEW_BIN/ddprun:$NEW_BIN/train_throughput")
else
  builds=("new:bazel-bin/launch/ddprun:bazel-bin/bench/train_throughput")
fi
if [[ -n "$BASE_BIN" ]]; then builds+=("base:$BASE_BIN/ddprun:$BASE_BIN/train_throughput"); fi

echo "# $(date) | $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), model" \
  "$(lscpu | sed -n 's/^Model: *//p')) | $(nproc) CPUs | load before: $(cut -d' ' -f1-4 /proc/loadavg)"
echo "# $NPROC ranks, --model=$MODEL --steps=$STEPS --warmup=$WARMUP, $ROUNDS rounds, busy processes: $BUSY"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
runs=()
for n in $BUSY; do
  for backend in $BACKENDS; do
    for build in "${builds[@]}"; do runs+=("$n:$backend:$build"); done
  done
done
# Waits (bounded) until the machine is quiet; prints how long it waited.
wait_quiet() {
  local start=$SECONDS calm=0
  while ((calm < 3 && SECONDS - start < ${QUIET_MAX_S:-1800})); do
    local runnable
    runnable=$(cut -d' ' -f4 /proc/loadavg)
    if ((${runnable%/*} <= 2)); then calm=$((calm + 1)); else calm=0; fi
    ((calm < 3)) && sleep 5
  done
  echo "# round $1: waited $((SECONDS - start)) s for a quiet machine$( ((calm < 3)) && echo ' (gave up)')"
}
for ((round = 0; round < ROUNDS; ++round)); do
  if [[ -n "${QUIET:-}" ]]; then wait_quiet "$round"; fi
  for ((i = 0; i < ${#runs[@]}; ++i)); do
    IFS=: read -r n backend name ddprun bin <<<"${runs[$(((i + round) % ${#runs[@]}))]}"
    rate=$(bash bench/contend.sh "$n" "$ddprun" --nproc_per_node="$NPROC" --master_port=0 "$bin" --model="$MODEL" \
             --backend="$backend" --steps="$STEPS" --warmup="$WARMUP" 2>/dev/null |
           sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')
    echo "round $round busy $n $backend $name ${rate:-failed} runnable $(cut -d' ' -f4 /proc/loadavg)" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import statistics, sys
from collections import defaultdict
rates = defaultdict(list)
for line in open(sys.argv[1]):
    _, _, _, n, backend, build, rate = line.split()[:7]
    if rate != "failed":
        rates[(build, backend, int(n))].append(float(rate))
print("\nbuild  backend  busy  median samples/s  range            ratio to quiet  runs")
for (build, backend, n), values in sorted(rates.items()):
    median = statistics.median(values)
    quiet = rates.get((build, backend, 0))
    ratio = f"{median / statistics.median(quiet):.2f}" if quiet else "-"
    print(f"{build:6s} {backend:8s} {n:4d}  {median:16.0f}  {min(values):6.0f}-{max(values):<8.0f} {ratio:>14s}  {len(values):4d}")
PY
