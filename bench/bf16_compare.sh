#!/bin/bash
# bf16 mixed precision against float32, ours and PyTorch's autocast, one process, one thread, pinned to
# one core under SCHED_FIFO, interleaved (ours fp32, ours bf16, for resnet18 with
# --memory_format=contiguous and again with --memory_format=channels_last, PyTorch fp32, PyTorch bf16,
# and for the convolutional models PyTorch fp32 and bf16 again in torch.channels_last, the layout
# oneDNN's CPU convolutions run natively and PyTorch's fastest on these models; repeated).
# Prints the CPU model and its bf16/AMX flags, then one JSON line per run (bench/train_throughput and
# bench/pytorch_reference.py), for BENCHMARKS.md "bf16 mixed precision".
#
#   bash bench/bf16_compare.sh [models (default "mlp cnn resnet18")] [rounds (default 3)]
#   STEPS=100 WARMUP=10 CORE=1 bash bench/bf16_compare.sh mlp 5
# VARIANT="NAME=VALUE ..." adds, each round, a run of ours in bf16 with those settings in its environment
# after the default one (e.g. VARIANT=DDP_BF16_CONV_INPUT_GRAD=forward), VARIANT_FLAGS="--flag ..." one
# with those flags (e.g. VARIANT_FLAGS=--memory_format=contiguous; without one the run takes the default
# layout, which for resnet18 under bf16 is channels-last), both one run with both; a "# variant" line
# precedes it.
# PRECISIONS="fp32 bf16 fp16" adds fp16 (autocast with the loss scaler, both sides) to every run's
# precisions (default "fp32 bf16").
# DATASET=cifar10 runs on CIFAR-10's shapes (bench/dataset_env.sh: DATA_DIR, or a synthetic folder).
# RT=0 runs without SCHED_FIFO, so that other processes on the core take their share: under load, e.g.
#   RT=0 taskset -c 1 bash bench/contend.sh 1 bash bench/bf16_compare.sh resnet18 2
# (one busy process on the same core as every run).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-"mlp cnn resnet18"}
rounds=${2:-3}
precisions=${PRECISIONS:-"fp32 bf16"}
core=${CORE:-1}
realtime=(chrt -f 5)
if [ "${RT:-1}" = 0 ]; then realtime=(); fi
source bench/pytorch_env.sh
source bench/dataset_env.sh >&2
bazel build //bench:train_throughput >&2
ours=bazel-bin/bench/train_throughput
echo "# $(date -u) RT=${RT:-1} load: $(cut -d' ' -f1-3 /proc/loadavg) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); flags: $(grep -o -E 'amx[a-z_0-9]*|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')DDP settings: $(env | grep '^DDP_' | sort | tr '\n' ' ')"
for model in $models; do
  steps=${STEPS:-100}; warmup=${WARMUP:-10}
  if [ "$model" = resnet18 ]; then steps=${STEPS:-12}; warmup=${WARMUP:-3}; fi
  ours_layouts=("")
  if [ "$model" = resnet18 ]; then ours_layouts=(--memory_format=contiguous --memory_format=channels_last); fi
  for round in $(seq "$rounds"); do
    for layout in "${ours_layouts[@]}"; do
      for precision in $precisions; do
        # shellcheck disable=SC2086 # layout is empty or one flag
        "${realtime[@]}" taskset -c "$core" "$ours" --model="$model" --precision="$precision" --steps="$steps" \
          --warmup="$warmup" --threads=1 "${data_flags[@]}" $layout
      done
    done
    if [ -n "${VARIANT:-}${VARIANT_FLAGS:-}" ]; then
      echo "# variant: ${VARIANT:-} ${VARIANT_FLAGS:-}"
      # shellcheck disable=SC2086 # VARIANT and VARIANT_FLAGS are lists of words
      env ${VARIANT:-} "${realtime[@]}" taskset -c "$core" "$ours" --model="$model" --precision=bf16 \
        --steps="$steps" --warmup="$warmup" --threads=1 "${data_flags[@]}" ${VARIANT_FLAGS:-}
    fi
    layouts=("")
    if [ "$model" != mlp ]; then layouts+=(--channels_last); fi
    for layout in "${layouts[@]}"; do
      for precision in $precisions; do
        # shellcheck disable=SC2086 # layout is empty or one flag
        "${realtime[@]}" taskset -c "$core" "$TORCH_PY" bench/pytorch_reference.py --model="$model" \
          --precision="$precision" --steps="$steps" --warmup="$warmup" --threads=1 "${data_flags[@]}" $layout
      done
    done
  done
done
