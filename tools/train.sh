#!/usr/bin/env bash
# The main job: 2-rank DDP training of the cnn on Fashion-MNIST over Gloo, launched by ddprun
# (extra arguments go to //train:train, e.g. --epochs=1 or --model=mlp). Batch 64 per rank makes a
# global batch of 128, so the learning rate follows the linear scaling rule: 2 x the one-process 0.01.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //train:train //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -2
exec bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/train/train --model=cnn --backend=gloo --lr=0.02 "$@"
