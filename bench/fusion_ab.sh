#!/usr/bin/env bash
# What running each conv -> ReLU -> pool block as one op gains (Note [Fusion in Sequential]): interleaved
# rounds of the same binary with --fuse_blocks=true and false, on the cnn (or MODEL), one process pinned
# to core 0 and 2-rank DDP over shm with gradient_as_bucket_view, with PyTorch's single process (one
# thread, pinned) in the same rounds. Prints each round's fused/unfused ratio and the medians.
#   bash bench/fusion_ab.sh                  ROUNDS=8 STEPS=60 MODEL=cnn_bn bash bench/fusion_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/pytorch_env.sh
bash tools/setup.sh
bazel build //bench:train_throughput //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
ROUNDS=${ROUNDS:-6}
STEPS=${STEPS:-60}
MODEL=${MODEL:-cnn}
out=$(mktemp)
one() { taskset -c 0 bazel-bin/bench/train_throughput --model="$MODEL" --steps="$STEPS" --threads=1 "$@"; }
two() {
  bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/train_throughput --model="$MODEL" \
    --steps="$STEPS" --threads=1 --backend=shm --gradient_as_bucket_view "$@" | sed 's/^\[rank 0\] //'
}
for round in $(seq "$ROUNDS"); do
  for fuse in true false; do
    one --fuse_blocks="$fuse" | tee -a "$out"
    two --fuse_blocks="$fuse" | tee -a "$out"
  done
  taskset -c 0 "$TORCH_PY" bench/pytorch_reference.py \
    --model="$MODEL" --steps="$STEPS" --threads=1 | tee -a "$out"
done
/usr/bin/python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rounds = int(sys.argv[2])
def series(impl, world, fuse=None):
    return [r["samples_per_s"] for r in rows if r["impl"] == impl and r["world_size"] == world
            and (fuse is None or r.get("fuse_blocks") == fuse)]
pt = series("pytorch", 1)
for world in (1, 2):
    fused, unfused = series("ddpengine", world, True), series("ddpengine", world, False)
    ratios = [f / u for f, u in zip(fused, unfused)]
    print(f"world {world}: fused/unfused per round " + ", ".join(f"{x:.2f}" for x in ratios)
          + f"; median {statistics.median(ratios):.2f} (samples/s: fused {statistics.median(fused):,.0f},"
          f" unfused {statistics.median(unfused):,.0f})")
ours = series("ddpengine", 1, True)
print("single process against PyTorch's, per round: fused " + ", ".join(f"{o / p:.2f}x" for o, p in zip(ours, pt))
      + "; unfused " + ", ".join(f"{o / p:.2f}x" for o, p in zip(series("ddpengine", 1, False), pt)))
PY
rm -f "$out"
