#!/bin/bash
# Loading a model's weights, ours against PyTorch, on the same files: a fresh MODEL (resnet18 by default)
# is written as .pt (torch.save's format) and .safetensors by our writer; then ROUNDS rounds alternate
# bench/weights_load_bench (LoadModuleWeights, as --init_from) and bench/pytorch_weights_load.py
# (torch.load(weights_only=True) with and without mmap, safetensors' load_file where importable, each +
# load_state_dict(strict=True)), each pinned to one core with one thread.
#
#   bash bench/weights_load_compare.sh            # MODEL=resnet18 ROUNDS=3 LOADS=20 CPU=1
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-resnet18} ROUNDS=${ROUNDS:-3} LOADS=${LOADS:-20} CPU=${CPU:-1}
source bench/pytorch_env.sh
bazel build -c opt //bench:weights_load_bench >/dev/null 2>&1
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
bazel-bin/bench/weights_load_bench --model="$MODEL" --write_prefix="$DIR/w"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), PyTorch $TORCH_VERSION, $(date -u +%Y-%m-%dT%H:%MZ)"
for round in $(seq "$ROUNDS"); do
  echo "# round $round"
  taskset -c "$CPU" bazel-bin/bench/weights_load_bench --model="$MODEL" --loads="$LOADS" "$DIR/w.pt" "$DIR/w.safetensors"
  PYTHONPATH=/opt/ddpengine-py${PYTHONPATH:+:$PYTHONPATH} taskset -c "$CPU" "$TORCH_PY" bench/pytorch_weights_load.py \
    --model="$MODEL" --loads="$LOADS" "$DIR/w.pt" "$DIR/w.safetensors"
done
