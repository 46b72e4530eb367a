#!/usr/bin/env bash
# The main job: 2-rank DDP training of the cnn on Fashion-MNIST, launched by ddprun, on the default
# backend, as users' jobs run (auto: shared memory on one host, Gloo where /dev/shm is too small).
# Extra arguments go to //train:train, e.g. --epochs=1, --model=mlp or --backend=gloo. Batch 64 per
# rank makes a global batch of 128, so the learning rate follows the linear scaling rule: 2 x the
# one-process 0.01.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //train:train //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -2
exec bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/train/train --model=cnn --lr=0.02 "$@"
