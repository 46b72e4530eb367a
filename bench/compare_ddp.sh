#!/usr/bin/env bash
# DDP throughput, ours vs PyTorch DDP over gloo (bench/pytorch_env.sh: 2.x from PyPI), in the same run (alternating, so load on the
# machine hits both alike). 1 thread per rank, batch 64 per rank, pre-loaded Fashion-MNIST batches.
#   * world size 1: DDP-wrapped vs plain module (DDP's own overhead), for ours and PyTorch;
#   * world size 2: samples/s over both ranks, ours over Gloo (like for like) and over shared memory
#     (`--backend=shm`, what train/train picks on one host), plus communication / exposed communication;
#   * world size 2 with gradient_as_bucket_view (.grad tensors live in the buckets: no copy in or back),
#     ours over shm and PyTorch over gloo, each with its option of that name;
#   * the machine's ceiling for two processes: two independent single processes (no DDP) at the same time,
#     pinned to cores 0 and 1, samples/s summed. 2-rank DDP cannot beat it; "shm/ceiling" says how much of
#     it DDP keeps (the rest is communication and the ranks' waiting for each other);
#   * lockstep: two ranks that each train their own replica and only meet in a one-element all-reduce
#     after every backward (`--ablation=lockstep`): 2-rank DDP moving its gradients at no cost would reach
#     this, so it bounds what any transport can do; "view/lockstep" is what moving the gradients costs.
#   * noise bound: what two ranks that meet once a step would reach if each step lasted as long as the
#     slower of the pair's two concurrent steps of the same index (each process's step times come from
#     `--step_times_out`; bench/step_times.h): the cost of this machine's step-to-step noise alone, which
#     every lockstep job pays, whatever it moves;
#   * per round: each round's own ratios (DDP/single, lockstep/single, ...), median over the rounds: the
#     commands of one round run minutes apart at most, where the machine's speed drifts less than between
#     rounds.
#
#   bash bench/compare_ddp.sh                    # mlp and cnn, 3 rounds
#   MODELS=cnn ROUNDS=5 bash bench/compare_ddp.sh      (MLP_STEPS / CNN_STEPS change the step counts)
#   MODELS=resnet18 bash bench/compare_ddp.sh    (RESNET_STEPS timed steps, default 6, after 2 warm-up steps:
#                                                 a resnet18 step takes ~2 s; 11 runs per round)
#   DATASET=cifar10 MODELS=resnet18 bash bench/compare_ddp.sh   (CIFAR-10's shapes, as bench/compare_train.sh:
#                                                 batches from DATA_DIR or a synthetic folder)
#   PRECISION=bf16 THEIRS_FLAGS=--channels_last DATASET=cifar10 MODELS=resnet18 bash bench/compare_ddp.sh
#                                                (every run of both sides under that --precision, autocast
#                                                 on PyTorch's side; THEIRS_FLAGS: more flags for PyTorch's
#                                                 runs, here its fastest layout for bf16 convolutions)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/pytorch_env.sh
bash tools/setup.sh
bazel build //bench:train_throughput //launch:ddprun 2>&1 | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' | tail -1
MODELS=${MODELS:-"mlp cnn"}
ROUNDS=${ROUNDS:-3}
source bench/dataset_env.sh
if [[ -n ${PRECISION:-} ]]; then data_flags+=(--precision="$PRECISION"); fi  # both sides take the flag
read -r -a theirs_flags <<<"${THEIRS_FLAGS:-}"
out=$(mktemp)
# World-size-1 runs are pinned to core 0 on both sides; bench/pytorch_env.sh gives PyTorch one-thread
# OpenMP, MKL and OpenBLAS pools everywhere (they otherwise start threads on the other core).
ours() { taskset -c 0 bazel-bin/bench/train_throughput --steps="$STEPS" --warmup="$WARMUP" --threads=1 "${data_flags[@]}" "$@"; }
ours2() { bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/train_throughput --steps="$STEPS" --warmup="$WARMUP" --threads=1 "${data_flags[@]}" "$@" | sed 's/^\[rank 0\] //'; }
# Two single processes at once, pinned to cores 0 and 1; prints one JSON line with their samples/s summed.
pair() {
  local a b
  a=$(mktemp) b=$(mktemp)
  taskset -c 0 bazel-bin/bench/train_throughput --steps="$STEPS" --warmup="$WARMUP" --threads=1 --step_times_out="$a.steps" \
    "${data_flags[@]}" "$@" >"$a" &
  taskset -c 1 bazel-bin/bench/train_throughput --steps="$STEPS" --warmup="$WARMUP" --threads=1 --step_times_out="$b.steps" \
    "${data_flags[@]}" "$@" >"$b"
  wait
  /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.startswith("{")]
assert len(rows) == 2, "pair: expected one result line from each of the two processes"
a, b = ([float(l) for l in open(f + ".steps")] for f in sys.argv[1:])
assert len(a) == len(b) > 0, "pair: the two processes timed different step counts"
slower = sum(max(x, y) for x, y in zip(a, b)) / len(a)  # ms: a step of two ranks that meet once a step
print(json.dumps({"impl": "ddpengine", "model": rows[0]["model"], "world_size": 1, "ddp": False, "pair": True,
                  "samples_per_s": sum(r["samples_per_s"] for r in rows),
                  "noise_bound_samples_per_s": 2 * rows[0]["batch_size"] * 1000 / slower,
                  "step_cv": max(r["step_cv"] for r in rows)}))' "$a" "$b"
  rm -f "$a" "$b" "$a.steps" "$b.steps"
}
theirs() { "$TORCH_PY" bench/pytorch_reference.py --steps="$STEPS" --warmup="$WARMUP" --threads=1 "${data_flags[@]}" "${theirs_flags[@]}" "$@"; }
theirs1() { taskset -c 0 "$TORCH_PY" bench/pytorch_reference.py --steps="$STEPS" --warmup="$WARMUP" --threads=1 "${data_flags[@]}" "${theirs_flags[@]}" "$@"; }
for model in $MODELS; do
  # About 4 s of timed steps per run, so that a 3% difference is above the noise (mlp steps are ~2 ms).
  WARMUP=20
  if [[ $model == mlp ]]; then STEPS=${MLP_STEPS:-2000}; else STEPS=${CNN_STEPS:-200}; fi
  # resnet18: ~2 s per step, so a run of 6 steps is as long as the cnn's 200; 2 warm-up steps fill the
  # caches and the allocator, and the bucket rebuild happens after the first.
  [[ $model == resnet18 ]] && STEPS=${RESNET_STEPS:-6} WARMUP=2
  for round in $(seq "$ROUNDS"); do
    echo "# round $model $round" >> "$out"
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
rows, round_name = [], None
for line in open(sys.argv[1]):
    if line.startswith("# round "):
        round_name = line.split()[-1]
    elif line.startswith("{"):
        rows.append(dict(json.loads(line), round=round_name))
def select(model, impl, world, ddp, backend=None, pair=False, view=False, rnd=None):
    """The result rows of one configuration (of round `rnd`, or of every round)."""
    return [r for r in rows if r["model"] == model and r["impl"] == impl and r["world_size"] == world
            and bool(r.get("ddp")) == ddp and (backend is None or r.get("backend") == backend)
            and bool(r.get("pair")) == pair and bool(r.get("gradient_as_bucket_view")) == view
            and (rnd is None or r["round"] == rnd)]
def med(model, impl, world, ddp, key="samples_per_s", backend=None, pair=False, view=False):
    vals = [r[key] for r in select(model, impl, world, ddp, backend, pair, view)]
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
print("\nper round (each round's own ratios; median over the rounds, then every round in order)")
print("model  shm/single  shm view/single  lockstep/single  noise bound/single  two at once/single"
      "  view/lockstep  view/noise bound  view/PyTorch view | single process step time: p90/p50  cv")
def one(model, rnd, impl="ddpengine", **kw):
    found = select(model, impl, rnd=rnd, **kw)
    return found[0] if found else None
for model in dict.fromkeys(r["model"] for r in rows):
    per = []
    for rnd in dict.fromkeys(r["round"] for r in rows if r["model"] == model):
        single = one(model, rnd, world=1, ddp=False)
        shm = one(model, rnd, world=2, ddp=True, backend="shm")
        view = one(model, rnd, world=2, ddp=True, backend="shm", view=True)
        lock = one(model, rnd, world=2, ddp=False)
        pair = one(model, rnd, world=1, ddp=False, pair=True)
        pt_view = one(model, rnd, impl="pytorch", world=2, ddp=True, view=True)
        if None in (single, shm, view, lock, pair, pt_view):
            continue
        s, v = single["samples_per_s"], view["samples_per_s"]
        per.append((shm["samples_per_s"] / s, v / s, lock["samples_per_s"] / s,
                    pair["noise_bound_samples_per_s"] / s, pair["samples_per_s"] / s,
                    v / lock["samples_per_s"], v / pair["noise_bound_samples_per_s"],
                    v / pt_view["samples_per_s"], single["step_ms_p90"] / single["step_ms_p50"],
                    single["step_cv"]))
    if not per:
        continue
    medians = [statistics.median(p[i] for p in per) for i in range(len(per[0]))]
    widths = (11, 16, 16, 19, 19, 14, 17, 18, 35, 5)
    fmt = lambda row: " ".join(f"{x:{w}.2f}" if i < 9 else f"{x:{w}.3f}"
                               for i, (x, w) in enumerate(zip(row, widths)))
    print(f"{model:6s} {fmt(medians)}   (median of {len(per)})")
    for p in per:
        print(f"{'':6s} {fmt(p)}")
PY
rm -f "$out"
