#!/usr/bin/env bash
# DDP throughput, ours vs PyTorch 1.13 DDP over gloo, in the same run (alternating, so load on the
# machine hits both alike). 1 thread per rank, batch 64 per rank, pre-loaded Fashion-MNIST batches.
#   * world size 1: DDP-wrapped vs plain module (DDP's own overhead), for ours and PyTorch;
#   * world size 2: samples/s over both ranks, ours over Gloo (like for like) and over shared memory
#     (`--backend=shm`, what examples/train picks on one host), plus communication / exposed communication;
#   * world size 2 with gradient_as_bucket_view (.grad tensors live in the buckets: no copy in or back),
#     ours over shm and PyTorch over gloo, each with its option of that name;
#   * the machine's ceiling for two processes: two independent single processes (no DDP) at the same time,
#     pinned to cores 0 and 1, samples/s summed. 2-rank DDP cannot beat it; "shm/ceiling" says how much of
#     it DDP keeps (the rest is communication and the ranks' waiting for each other);
#   * lockstep: two ranks that each train their own replica and only meet in a one-element all-reduce
#     after every backward (`--ablation=lockstep`): 2-rank DDP moving its gradients at no cost would reach
#     this, so it bounds what any transport can do; "view/lockstep" is what moving the gradients costs.
#
#   bash bench/compare_ddp.sh                    # mlp and cnn, 3 rounds
#   MODELS=cnn ROUNDS=5 bash bench/compare_ddp.sh      (MLP_STEPS / CNN_STEPS change the step counts)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //bench:train_throughput //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
MODELS=${MODELS:-"mlp cnn"}
ROUNDS=${ROUNDS:-3}
out=$(mktemp)
# World-size-1 runs are pinned to core 0 on both sides; PyTorch gets OMP_NUM_THREADS=1 and
# OPENBLAS_NUM_THREADS=1 everywhere (its BLAS otherwise starts threads on the other core).
ours() { taskset -c 0 bazel-bin/bench/train_throughput --steps="$STEPS" --threads=1 "$@"; }
ours2() { bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/train_throughput --steps="$STEPS" --threads=1 "$@" | sed 's/^\[rank 0\] //'; }
# Two single processes at once, pinned to cores 0 and 1; prints one JSON line with their samples/s summed.
pair() {
  local a b
  a=$(mktemp) b=$(mktemp)
  taskset -c 0 bazel-bin/bench/train_throughput --steps="$STEPS" --threads=1 "$@" >"$a" &
  taskset -c 1 bazel-bin/bench/train_throughput --steps="$STEPS" --threads=1 "$@" >"$b"
  wait
  /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith("{")]
assert len(rows) == 2, "pair: expected one result line from each of the two processes"
print(json.dumps({"impl": "ddpengine", "model": rows[0]["model"], "world_size": 1, "ddp": False, "pair": True,
                  "samples_per_s": sum(r["samples_per_s"] for r in rows)}))' "$a" "$b"
  rm -f "$a" "$b"
}
theirs() { OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/pytorch_reference.py --steps="$STEPS" --threads=1 "$@"; }
theirs1() { OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 0 /usr/bin/python3 bench/pytorch_reference.py --steps="$STEPS" --threads=1 "$@"; }
for model in $MODELS; do
  # About 4 s of timed steps per run, so that a 3% difference is above the noise (mlp steps are ~2 ms).
  if [[ $model == mlp ]]; then STEPS=${MLP_STEPS:-2000}; else STEPS=${CNN_STEPS:-200}; fi
  for round in $(seq "$ROUNDS"); do
    ours --model="$model" | tee -a "$out"
    ours --model="$model" --ddp | tee -a "$out"
    theirs1 --model="$model" | tee -a "$out"
    theirs1 --model="$model" --ddp | tee -a "$out"
    ours2 --model="$model" --backend=gloo | tee -a "$out"
    ours2 --model="$model" --backend=shm | tee -a "$out"
    pair --model="$model" | tee -a "$out"
    ours2 --model="$model" --backend=shm --ablation=lockstep | tee -a "$out"
    ours2 --model="$model" --backend=shm --gradient_as_bucket_view | tee -a "$out"
    theirs --model="$model" --world_size=2 --gradient_as_bucket_view | tee -a "$out"
    theirs --model="$model" --world_size=2 | tee -a "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(model, impl, world, ddp, key="samples_per_s", backend=None, pair=False, view=False):
    vals = [r[key] for r in rows if r["model"] == model and r["impl"] == impl and r["world_size"] == world
            and bool(r.get("ddp")) == ddp and (backend is None or r.get("backend") == backend)
            and bool(r.get("pair")) == pair and bool(r.get("gradient_as_bucket_view")) == view]
    return statistics.median(vals) if vals else float("nan")
print("\nmedians over rounds (samples/s summed over ranks)")
print("model  world-1 DDP/plain step time: ours  pytorch | world 2 samples/s: ours gloo  ours shm  pytorch"
      "  gloo/pt  shm/pt | ours gloo comm ms  exposed ms | shm comm ms  exposed ms | single process: ours"
      " | two single processes at once  shm/ceiling  shm/single"
      " | gradient_as_bucket_view: ours shm  pytorch  shm/pt  shm/single"
      " | lockstep (no bytes moved)  /single  view/lockstep")
for model in dict.fromkeys(r["model"] for r in rows):
    o1 = med(model, "ddpengine", 1, False) / med(model, "ddpengine", 1, True)
    p1 = med(model, "pytorch", 1, False) / med(model, "pytorch", 1, True)
    g2, s2 = med(model, "ddpengine", 2, True, backend="gloo"), med(model, "ddpengine", 2, True, backend="shm")
    p2 = med(model, "pytorch", 2, True)
    gc, ge = (med(model, "ddpengine", 2, True, k, "gloo") for k in ("comm_ms", "exposed_comm_ms"))
    sc, se = (med(model, "ddpengine", 2, True, k, "shm") for k in ("comm_ms", "exposed_comm_ms"))
    single = med(model, "ddpengine", 1, False)
    ceiling = med(model, "ddpengine", 1, False, pair=True)
    print(f"{model:6s} {o1:33.3f} {p1:8.3f} | {g2:28.0f} {s2:9.0f} {p2:8.0f} {g2 / p2:7.2f}x {s2 / p2:6.2f}x |"
          f" {gc:17.2f} {ge:11.2f} | {sc:11.2f} {se:11.2f} | {single:22.0f} | {ceiling:28.0f}"
          f" {s2 / ceiling:12.2f} {s2 / single:10.2f}x", end="")
    sv, pv = med(model, "ddpengine", 2, True, backend="shm", view=True), med(model, "pytorch", 2, True, view=True)
    lockstep = med(model, "ddpengine", 2, False)
    print(f" | {sv:33.0f} {pv:8.0f} {sv / pv:6.2f}x {sv / single:10.2f}x"
          f" | {lockstep:25.0f} {lockstep / single:7.2f}x {sv / lockstep:13.2f}")
PY
rm -f "$out"
