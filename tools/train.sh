#!/usr/bin/env bash
# The main job: trains the cnn on Fashion-MNIST (extra arguments go to //examples:train).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //examples:train 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -3
exec bazel-bin/examples/train --model=cnn "$@"
