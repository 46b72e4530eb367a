#!/usr/bin/env bash
# What the flight recorder (comm/flight_recorder.h) costs per collective: bench/allreduce at 4 B, world 2,
# Gloo ("ours") and shared memory on a DDP bucket buffer ("shm_buf", the cheapest call we have), with the
# recorder on (DDP_FLIGHT_RECORDER_ENTRIES=2000, the default) and off (=0), runs interleaved
# (on, off, on, off, ...) so that load on the machine hits both alike. Prints the median of the runs'
# medians per impl and setting, the range, and the difference.
#
#   bash bench/flight_recorder_cost.sh               # 15 rounds of (on, off)
#   ROUNDS=31 bash bench/flight_recorder_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //bench:allreduce 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
ROUNDS=${ROUNDS:-15}
# At real-time priority where allowed (as BENCHMARKS.md's all-reduce table): at normal priority a woken
# thread on a shared 2-core machine often waits for the next scheduler tick and medians jump.
RT=""
if chrt -f 5 true 2>/dev/null; then RT="chrt -f 5"; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$(date); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ${RT:-normal priority}; $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  for entries in 2000 0; do
    DDP_FLIGHT_RECORDER_ENTRIES=$entries $RT bazel-bin/bench/allreduce --world_sizes=2 --min_bytes=4 --max_bytes=4 \
      --impls=ours,shm_buf --settle_calls=1 --target_ms=300 --format=json |
      sed "s/^{/{\"entries\": $entries, /" >> "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("impl      recorder   median us   range us (per run medians)   on - off")
for impl in ("ours", "shm_buf"):
    times = {e: [r["time_us"] for r in rows if r["impl"] == impl and r["entries"] == e] for e in (2000, 0)}
    med = {e: statistics.median(t) for e, t in times.items()}
    for e, label in ((2000, "on (2000)"), (0, "off")):
        diff = f"{med[2000] - med[0]:+.3f} us ({100 * (med[2000] / med[0] - 1):+.1f}%)" if e == 0 else ""
        print(f"{impl:9s} {label:10s} {med[e]:10.3f}   {min(times[e]):8.3f} .. {max(times[e]):8.3f}           {diff}")
PY
