#!/bin/bash
# One environment switch of ours, A against B (a kernel choice such as DDP_CONV_WEIGHT_GRAD or
# DDP_CONV_WINOGRAD_AVX2): one process, one thread, pinned to one core under SCHED_FIFO, interleaved: each
# round runs every (precision, layout) with VARIABLE=A, then with VARIABLE=B. Prints the CPU, one JSON line
# per run with "setting" added, and a summary: per run kind, the median (min-max) step and backward times
# with each value, and the median of the rounds' own A/B step-time ratios (> 1: B faster).
#
#   bash bench/environment_ab.sh VARIABLE "A B" [model (default resnet18)] [rounds (default 3)]
#   STEPS=5 WARMUP=1 RT=0 taskset -c 1 bash bench/contend.sh 1 bash bench/environment_ab.sh VARIABLE "A B"
# RT=0 runs without SCHED_FIFO (under load, as above: one busy process shares the core). CONFIGS="fp32
# contiguous;bf16 channels_last" picks the (precision, layout) pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/ab_values.sh
source bench/ab_values.sh "bash bench/environment_ab.sh VARIABLE \"A B\" [model] [rounds]" "$@"
model=${3:-resnet18}
rounds=${4:-3}
core=${CORE:-1}
realtime=(chrt -f 5)
if [ "${RT:-1}" = 0 ]; then realtime=(); fi
steps=${STEPS:-100}; warmup=${WARMUP:-10}
default_configs="fp32 contiguous;bf16 contiguous"
if [ "$model" = resnet18 ]; then
  steps=${STEPS:-5}; warmup=${WARMUP:-1}
  default_configs="fp32 contiguous;fp32 channels_last;bf16 channels_last"
fi
IFS=';' read -r -a configs <<< "${CONFIGS:-$default_configs}"
bazel build //bench:train_throughput >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u) RT=${RT:-1} load: $(cut -d' ' -f1-3 /proc/loadavg) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); flags: $(grep -o -E -w 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for _ in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    read -r precision layout <<< "$config"
    for value in "$value_a" "$value_b"; do
      line=$(env "$variable=$value" "${realtime[@]}" taskset -c "$core" bazel-bin/bench/train_throughput \
        --model="$model" --precision="$precision" --memory_format="$layout" --steps="$steps" \
        --warmup="$warmup" --threads=1 2>/dev/null | tail -n 1)
      echo "{\"setting\": \"$variable=$value\", ${line#\{}" | tee -a "$out"
    done
  done
done
python3 - "$out" "$variable=$value_a" "$variable=$value_b" <<'PY'
import json, statistics, sys
path, a_name, b_name = sys.argv[1:4]
runs = [json.loads(line) for line in open(path)]
times = {}  # (precision, layout) -> {setting: [(step ms, backward ms) per round]}
for run in runs:
    key = (run["precision"], run["memory_format"])
    times.setdefault(key, {}).setdefault(run["setting"], []).append((run["step_ms_p50"], run["backward_ms"]))
def cell(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
for (precision, layout), by in times.items():
    a, b = by.get(a_name, []), by.get(b_name, [])
    if not a or not b:
        continue
    ratios = [x[0] / y[0] for x, y in zip(a, b)]
    print(f"# {precision} {layout}: step {a_name} {cell([s for s, _ in a])} ms, {b_name} {cell([s for s, _ in b])} ms; "
          f"backward {cell([x for _, x in a])} / {cell([x for _, x in b])} ms; A/B "
          f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})")
PY
