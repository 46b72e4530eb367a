#!/bin/bash
# The weight gradients of the convolutions on oneDNN's backward-weights primitive and on im2col, ours only
# (Note [Float32 weight gradients on im2col without AVX-512], tensor/conv_onednn.h;
# DDP_CONV_WEIGHT_GRAD=primitive|im2col puts them on one or the other whatever the CPU): one process, one
# thread, pinned to one core under SCHED_FIFO, interleaved: each round runs every (precision, layout) with
# the primitive, then with im2col. Prints the CPU, one JSON line per run with "weight_gradient" added, and
# a summary: per run kind, the median (min-max) step and backward times on each, and the median of the
# rounds' own primitive/im2col step ratios (> 1: im2col faster).
#
#   bash bench/conv_weight_gradient_ab.sh [model (default resnet18)] [rounds (default 3)]
#   STEPS=5 WARMUP=1 RT=0 taskset -c 1 bash bench/contend.sh 1 bash bench/conv_weight_gradient_ab.sh
# RT=0 runs without SCHED_FIFO (under load, as above: one busy process shares the core).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet18}
rounds=${2:-3}
core=${CORE:-1}
realtime=(chrt -f 5)
if [ "${RT:-1}" = 0 ]; then realtime=(); fi
steps=${STEPS:-100}; warmup=${WARMUP:-10}
configs=("fp32 contiguous" "bf16 contiguous")
if [ "$model" = resnet18 ]; then
  steps=${STEPS:-5}; warmup=${WARMUP:-1}
  configs=("fp32 contiguous" "fp32 channels_last" "bf16 channels_last")
fi
bazel build //bench:train_throughput >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u) RT=${RT:-1} load: $(cut -d' ' -f1-3 /proc/loadavg) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); flags: $(grep -o -E -w 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for _ in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    read -r precision layout <<< "$config"
    for where in primitive im2col; do
      line=$(DDP_CONV_WEIGHT_GRAD=$where "${realtime[@]}" taskset -c "$core" bazel-bin/bench/train_throughput \
        --model="$model" --precision="$precision" --memory_format="$layout" --steps="$steps" \
        --warmup="$warmup" --threads=1 2>/dev/null | tail -n 1)
      echo "{\"weight_gradient\": \"$where\", ${line#\{}" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
times = {}  # (precision, layout) -> {where: [(step ms, backward ms) per round]}
for run in runs:
    key = (run["precision"], run["memory_format"])
    times.setdefault(key, {}).setdefault(run["weight_gradient"], []).append((run["step_ms_p50"], run["backward_ms"]))
def cell(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
for (precision, layout), by in times.items():
    p, i = by.get("primitive", []), by.get("im2col", [])
    if not p or not i:
        continue
    ratios = [a[0] / b[0] for a, b in zip(p, i)]
    print(f"# {precision} {layout}: step primitive {cell([s for s, _ in p])} ms, im2col {cell([s for s, _ in i])} ms; "
          f"backward {cell([b for _, b in p])} / {cell([b for _, b in i])} ms; primitive/im2col "
          f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})")
PY
