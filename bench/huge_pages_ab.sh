#!/bin/bash
# Transparent huge pages on and off, ours (Note [Huge pages for the heap], tensor/storage.cc;
# DDP_CPU_HUGE_PAGES=0 turns them off) and PyTorch's (its CPU allocator's THP_MEM_ALLOC_ENABLE=1, which
# bench/pytorch_env.sh sets), one process, one thread, pinned to one core under SCHED_FIFO, interleaved:
# each round runs every (side, precision) with huge pages on, then off. PyTorch's convolutional models
# run in torch.channels_last (its faster layout); ours take their default layout. Prints the CPU, one JSON
# line per run with "huge_pages" added, and a summary: per run kind, the median (min-max) step time with
# huge pages on and off, and the median of the rounds' own off/on ratios (> 1: huge pages faster).
#
#   bash bench/huge_pages_ab.sh [models (default resnet18)] [rounds (default 4)]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-resnet18}
rounds=${2:-4}
core=${CORE:-1}
source bench/pytorch_env.sh
bazel build //bench:train_throughput >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u) load: $(cut -d' ' -f1-3 /proc/loadavg) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo absent)"
# Runs "$@" and prints its last line, a JSON object, with "huge_pages": $pages in front.
tagged() {
  local pages=$1
  shift
  local line
  line=$("$@" | tail -n 1)
  echo "{\"huge_pages\": $pages, ${line#\{}" | tee -a "$out"
}
for model in $models; do
  steps=100; warmup=10; torch_layout=()
  if [ "$model" = resnet18 ]; then steps=10; warmup=2; fi
  if [ "$model" != mlp ]; then torch_layout=(--channels_last); fi
  for _ in $(seq "$rounds"); do
    for precision in fp32 bf16; do
      for pages in 1 0; do
        tagged "$pages" env DDP_CPU_HUGE_PAGES="$pages" chrt -f 5 taskset -c "$core" \
          bazel-bin/bench/train_throughput --model="$model" --precision="$precision" --steps="$steps" \
          --warmup="$warmup" --threads=1
        tagged "$pages" env THP_MEM_ALLOC_ENABLE="$pages" chrt -f 5 taskset -c "$core" "$TORCH_PY" \
          bench/pytorch_reference.py --model="$model" --precision="$precision" --steps="$steps" \
          --warmup="$warmup" --threads=1 "${torch_layout[@]}"
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
times = {}  # (model, side, precision) -> {pages: [ms per round]}
for run in runs:
    side = "ours" if run["impl"] == "ddpengine" else "torch"
    ms = run.get("step_ms_p50") or run["step_ms"]
    times.setdefault((run["model"], side, run["precision"]), {}).setdefault(run["huge_pages"], []).append(ms)
for (model, side, precision), by in times.items():
    on, off = by.get(1, []), by.get(0, [])
    ratios = [b / a for a, b in zip(on, off)]
    def cell(xs):
        return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" if xs else "-"
    ratio = f"{statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f})" if ratios else "-"
    print(f"# {model} {side} {precision}: huge pages on {cell(on)} ms, off {cell(off)} ms, off/on {ratio}")
PY
