#!/bin/bash
# Kernel threads on a machine other processes share: one process's step with one thread, with two, and
# with two under --adapt_threads (Note [Adaptive kernel threads]), ours and PyTorch's (one and two
# threads), quiet and beside one busy process (bench/contend.sh 1), in interleaved rounds. Prints a
# header, then one line per run: "<load> <side> <setting> <step_ms>", and the adaptive runs' stderr lines.
#
#   bash bench/threads_under_load.sh [model (default cnn)] [rounds (default 3)]
#   STEPS=200 WARMUP=10 BATCH=128 bash bench/threads_under_load.sh cnn 3
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-cnn}
rounds=${2:-3}
steps=${STEPS:-200}; warmup=${WARMUP:-10}; batch=${BATCH:-128}
source bench/pytorch_env.sh
bazel build //bench:train_throughput >&2
ours=bazel-bin/bench/train_throughput
err=$(mktemp)
trap 'rm -f "$err"' EXIT
echo "# $(date -u) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'), $(getconf _NPROCESSORS_ONLN) CPUs online; $model batch $batch, $steps steps after $warmup"
step_ms() { grep -o '"step_ms": [0-9.]*' | sed 's/.*: //'; }
for round in $(seq "$rounds"); do
  for load in 0 1; do
    for setting in "--threads=1" "--threads=2" "--threads=2 --adapt_threads"; do
      # shellcheck disable=SC2086 # setting is a list of flags
      ms=$(bash bench/contend.sh "$load" "$ours" --model="$model" --batch_size="$batch" --steps="$steps" \
        --warmup="$warmup" $setting 2>"$err" | step_ms)
      echo "load=$load ours $setting $ms"
      grep '^adaptive threads' "$err" | sed 's/^/#   /' || true
    done
    for threads in 1 2; do
      ms=$(bash bench/contend.sh "$load" "$TORCH_PY" bench/pytorch_reference.py --model="$model" \
        --batch_size="$batch" --steps=$((steps / 4)) --warmup="$warmup" --threads="$threads" 2>/dev/null | step_ms)
      echo "load=$load pytorch --threads=$threads $ms"
    done
  done
done
