#!/usr/bin/env bash
# Single-process training throughput, ours vs PyTorch (bench/pytorch_env.sh: 2.x from PyPI), in the same run,
# alternating the two so machine load hits both alike. Prints each run's JSON and a ratio table.
# One thread on both sides, pinned to core 0 (taskset), PyTorch with one-thread OpenMP/MKL/OpenBLAS pools.
#
#   bash bench/compare_train.sh                # mlp and cnn, batch 64, 1 thread, 3 rounds
#   MODELS="cnn" ROUNDS=5 bash bench/compare_train.sh
#   MODELS=resnet18 bash bench/compare_train.sh  # resnet18: RESNET_STEPS (6) timed steps after 2 warm-up
#                                                # steps (a step takes ~2 s), instead of STEPS after 20
#   DATASET=cifar10 MODELS=resnet18 bash bench/compare_train.sh
#       # CIFAR-10's shapes (3x32x32): batches from DATA_DIR, else from a synthetic folder in the binary
#       # version's layout that tools/synthetic_cifar10.py writes (speed does not depend on the pixels)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/pytorch_env.sh
bash tools/setup.sh
bazel build //bench:train_throughput 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
MODELS=${MODELS:-"mlp cnn"}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-64}
source bench/dataset_env.sh
out=$(mktemp)
for model in $MODELS; do
  steps=${STEPS:-200} warmup=20
  [[ $model == resnet18 ]] && steps=${RESNET_STEPS:-6} warmup=2
  for round in $(seq "$ROUNDS"); do
    taskset -c 0 bazel-bin/bench/train_throughput --model="$model" --batch_size="$BATCH" --steps="$steps" \
      --warmup="$warmup" --threads=1 "${data_flags[@]}" | tee -a "$out"
    taskset -c 0 "$TORCH_PY" bench/pytorch_reference.py --model="$model" --batch_size="$BATCH" \
      --steps="$steps" --warmup="$warmup" --threads=1 "${data_flags[@]}" | tee -a "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("\nmodel   ours samples/s  pytorch samples/s  ratio  ours peak MB  pytorch peak MB   (median of rounds)")
for model in dict.fromkeys(r["model"] for r in rows):
    ours = [r for r in rows if r["model"] == model and r["impl"] == "ddpengine"]
    ref = [r for r in rows if r["model"] == model and r["impl"] == "pytorch"]
    o = statistics.median(r["samples_per_s"] for r in ours)
    p = statistics.median(r["samples_per_s"] for r in ref)
    print(f"{model:7s} {o:14.0f} {p:18.0f} {o / p:6.2f}x {max(r['peak_rss_mb'] for r in ours):13.0f}"
          f" {max(r['peak_rss_mb'] for r in ref):16.0f}")
PY
rm -f "$out"
