#!/usr/bin/env bash
# The scaling predictions of BENCHMARKS.md, section Predicted scaling, from the simulator only:
#   scale_cnn.md       the cnn's measured compute profile (results/sim/profile_cnn.json, from bench/validate_sim.sh)
#   scale_mlp100m.md   a synthetic 100.7 M-parameter MLP (six 4096x4096 layers), batch 64 per rank, on a
#                      device sustaining 10 TFLOP/s with 900 GB/s memory
#   resnet50_dgx1.md   ResNet-50 at batch 32 per rank on V100s (8.85 TFLOP/s sustained: 3 x 8.2 GFLOP x 32
#                      images in 89 ms, about 360 images/s), 8 per host on NVLink, hosts on 100 Gb/s
#                      InfiniBand, against the PyTorch DDP paper's weak scaling; once without contention
#                      and once with 10% and 20% of compute lost while NCCL runs
# Links: Note [Cluster presets] in sim/link_model.h. Usage: bash sim/predict_scale.sh [--out=results/sim]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=results/sim
for arg in "$@"; do
  case "$arg" in
    --out=*) OUT="${arg#*=}" ;;
    *) echo "predict_scale.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
bazel build //sim:ddp_sim
SIM=bazel-bin/sim/ddp_sim
mkdir -p "$OUT"
$SIM scale --profile="$OUT/profile_cnn.json" > "$OUT/scale_cnn.md"
$SIM scale --synthetic=mlp:4096,4096,4096,4096,4096,4096,4096 --batch=64 --tflops=10 --mem_gbps=900 \
  > "$OUT/scale_mlp100m.md"
for lost in 0 0.1 0.2; do
  echo "compute_lost_to_comm=$lost"
  $SIM scale --synthetic=resnet50 --batch=32 --tflops=8.85 --mem_gbps=900 --presets=dgx1_ib --ranks=8,16,32 \
    --compute_lost_to_comm="$lost"
  echo
done > "$OUT/resnet50_dgx1.md"
echo "wrote $OUT/scale_cnn.md $OUT/scale_mlp100m.md $OUT/resnet50_dgx1.md"
