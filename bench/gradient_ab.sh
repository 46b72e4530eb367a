#!/bin/bash
# How much one environment switch of ours (a kernel choice such as DDP_CONV_WINOGRAD_AVX2) moves a training
# step's gradients: trains STEPS steps from the seed (SGD, lr 0.05, momentum 0.9, default kernels) and saves
# the weights, then from those weights runs one step with VARIABLE=A and one with VARIABLE=B, one process
# each, the same first batch (no shuffling), and dumps their gradients (--dump_grads); prints
# bench/gradient_diff.py's comparison, A's gradients the reference. Every run evaluates the test set at
# its end (train's behaviour), which takes most of the time.
#
#   bash bench/gradient_ab.sh VARIABLE "A B" [model (default resnet18)] [steps (default 60)]
# OUT=DIR keeps the weights and the dumps there (default: a temporary folder, removed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/ab_values.sh
source bench/ab_values.sh "bash bench/gradient_ab.sh VARIABLE \"A B\" [model] [steps]" "$@"
model=${3:-resnet18}
steps=${4:-60}
if [ -n "${OUT:-}" ]; then
  dir=$OUT
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
bazel build //train:train >&2
echo "# $(date -u) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); $model, $steps steps, then one step with $variable=$value_a (A) and $variable=$value_b (B)"
bazel-bin/train/train --model="$model" --max_steps="$steps" --optimizer=sgd --lr=0.05 --momentum=0.9 \
  --save="$dir/start.safetensors" > "$dir/start.log" 2>&1 ||
  { cat "$dir/start.log" >&2; exit 1; }
for value in "$value_a" "$value_b"; do
  env "$variable=$value" bazel-bin/train/train --model="$model" --init_from="$dir/start.safetensors" \
    --max_steps=1 --shuffle=false --dump_grads="$dir/grads_$value.safetensors" > "$dir/step_$value.log" 2>&1 ||
    { cat "$dir/step_$value.log" >&2; exit 1; }
done
python3 bench/gradient_diff.py "$dir/grads_$value_a.safetensors" "$dir/grads_$value_b.safetensors"
