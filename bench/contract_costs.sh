#!/usr/bin/env bash
# What the DDP contract checks cost, measured in one run on 2 ranks over Gloo:
#   * the wrap-time settings agreement (DDP's one exchange of ~10 named settings), median of 20 calls;
#   * the per-step cost of train/train's default mode (a Join: one small all-reduce per forward, which
#     also carries the SIGTERM stop agreement) and of the stop check without Join (an overlapped
#     one-element all-reduce), against no per-step check, on the cnn: step time, interleaved rounds;
#   * DDP_DEBUG=detail per collective: bench/allreduce with and without --debug_detail (4 B .. 4 MiB).
#
#   bash bench/contract_costs.sh            # 5 rounds, 200 cnn steps each
#   ROUNDS=3 STEPS=100 bash bench/contract_costs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //bench:train_throughput //bench:allreduce //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-200}
out=$(mktemp)
for round in $(seq "$ROUNDS"); do
  for mode in none join stop_check; do
    bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/train_throughput --model=cnn \
      --steps="$STEPS" --threads=1 --per_step="$mode" | sed 's/^\[rank 0\] //' | grep '^{' | tee -a "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda mode, key: statistics.median(r[key] for r in rows if r["per_step"] == mode)
base = med("none", "step_ms")
print(f"\nsettings agreement at wrap time: median {statistics.median(r['settings_agreement_ms'] for r in rows):.3f} ms")
print("cnn, 2 ranks, per-step check   step ms (median of rounds)   vs none")
for mode in ("none", "join", "stop_check"):
    print(f"  {mode:28s} {med(mode, 'step_ms'):10.3f} {100 * (med(mode, 'step_ms') / base - 1):+9.2f}%")
PY
echo
# At real-time priority where allowed (as BENCHMARKS.md's all-reduce table): at normal priority a woken
# thread on this shared 2-core machine often waits for the next scheduler tick and medians jump.
RT=""
if chrt -f 5 true 2>/dev/null; then RT="chrt -f 5"; fi
echo "DDP_DEBUG=detail per collective (world 2, 'ours' column${RT:+, under $RT}):"
$RT bazel-bin/bench/allreduce --world_sizes=2 --max_bytes=4194304 --format=json > "$out.plain"
$RT bazel-bin/bench/allreduce --world_sizes=2 --max_bytes=4194304 --format=json --debug_detail > "$out.debug"
/usr/bin/python3 - "$out.plain" "$out.debug" <<'PY'
import json, sys
load = lambda p: {r["bytes"]: r["time_us"] for r in map(json.loads, open(p)) if r["impl"] == "ours"}
plain, debug = load(sys.argv[1]), load(sys.argv[2])
print("  bytes      plain_us   detail_us   extra_us")
for b in sorted(plain):
    print(f"  {b:9d} {plain[b]:10.1f} {debug[b]:11.1f} {debug[b] - plain[b]:+10.1f}")
PY
rm -f "$out" "$out.plain" "$out.debug"
