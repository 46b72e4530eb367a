#!/bin/bash
# DDP's gradient wire formats against each other, 2 ranks, one thread each, interleaved per round: the
# float32 all-reduce, `--reduce_dtype=bf16` (bf16 buckets: half the bytes) and the bf16 and fp16 comm hooks
# (PyTorch's compression hooks), on the local backends (shm, Gloo over loopback) and, where the machine
# allows network namespaces (root, iproute2), Gloo across a veth link limited to RATE each way
# (bench/netns_link.sh): the case the smaller wire format is for. Ranks run under `chrt -f 5` (RT below).
# Prints the CPU model, then one line per run: the arm, then bench/train_throughput's JSON; and a table of
# medians per arm (step ms, exposed communication ms, KiB sent per step) with each arm's speed against
# float32's in the same round.
#
#   bash bench/reduce_dtype_compare.sh [models (default "mlp cnn")] [rounds (default 3)]
#   LINKS="shm gloo 1gbit" FLAGS="--precision=bf16 --memory_format=channels_last" STEPS=6 WARMUP=2 \
#     bash bench/reduce_dtype_compare.sh resnet18 3
# LINKS: any of shm, gloo (loopback) and a tc rate such as 1gbit or 100mbit (default "shm gloo 1gbit");
# ARMS: any of fp32, reduce_bf16, hook_bf16, hook_fp16 (default all four); FLAGS: more flags for every run;
# RT=0 runs the ranks at normal priority: under SCHED_FIFO a rank's communication thread waits while its own
# compute holds the core (2 ranks on 2 cores), so RT=1 (the default) shows how exposed communication costs,
# RT=0 how much of it the backward pass hides.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-"mlp cnn"}
rounds=${2:-3}
links=${LINKS:-"shm gloo 1gbit"}
arms=${ARMS:-"fp32 reduce_bf16 hook_bf16 hook_fp16"}
bazel build //bench:train_throughput //launch:ddprun >&2
ddprun=$PWD/bazel-bin/launch/ddprun
bench=$PWD/bazel-bin/bench/train_throughput
source bench/netns_link.sh
trap netns_link_down EXIT
echo "# $(date -u) RT=${RT:-1} load: $(cut -d' ' -f1-3 /proc/loadavg) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') family $(grep -m1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m1 '^model' /proc/cpuinfo | sed 's/.*: //'); $(nproc) cores; FLAGS: ${FLAGS:-}"

realtime=(chrt -f 5)
if [ "${RT:-1}" = 0 ]; then realtime=(); fi

arm_flags() {
  case "$1" in
    fp32) echo "--reduce_dtype=fp32" ;;
    reduce_bf16) echo "--reduce_dtype=bf16" ;;
    hook_bf16) echo "--comm_hook=bf16" ;;
    hook_fp16) echo "--comm_hook=fp16" ;;
    *) echo "reduce_dtype_compare: unknown arm $1 (fp32, reduce_bf16, hook_bf16, hook_fp16)" >&2; return 2 ;;
  esac
}

results=$(mktemp)
for model in $models; do
  steps=${STEPS:-100}; warmup=${WARMUP:-10}
  if [ "$model" = resnet18 ]; then steps=${STEPS:-6}; warmup=${WARMUP:-2}; fi
  for link in $links; do
    if [[ "$link" != shm && "$link" != gloo ]]; then
      netns_link_down
      if ! netns_link_up "$link"; then echo "# $link: no network-namespace link here; skipped" >&2; continue; fi
    fi
    for round in $(seq "$rounds"); do
      for arm in $arms; do
        flag=$(arm_flags "$arm")
        common=(--model="$model" --steps="$steps" --warmup="$warmup" --threads=1 $flag ${FLAGS:-})
        if [ "$link" = shm ] || [ "$link" = gloo ]; then
          json=$("${realtime[@]}" "$ddprun" --nproc_per_node=2 --master_port=0 "$bench" --backend="$link" "${common[@]}" 2>&1 |
            grep -o '{"impl".*' | head -1 || true)
        else
          json=$(netns_run_pair "$ddprun" "${realtime[@]}" -- "$bench" --backend=gloo "${common[@]}" 2>&1 |
            grep -o '{"impl".*' | head -1 || true)
        fi
        [ -n "$json" ] || { echo "# $model $link $arm round $round: no result" >&2; continue; }
        echo "$model $link $arm $round $json" | tee -a "$results"
      done
    done
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    model, link, arm, rnd, js = line.split(" ", 4)
    runs[(model, link, arm, rnd)] = json.loads(js)
print("\n| model | link | arm | step ms | exposed comm ms | KiB sent/step | speed vs fp32 (per round) |")
print("|---|---|---|---:|---:|---:|---|")
for model, link, arm in dict.fromkeys(k[:3] for k in runs):
    rows = {k[3]: v for k, v in runs.items() if k[:3] == (model, link, arm)}
    step = statistics.median(r["step_ms"] for r in rows.values())
    exposed = statistics.median(r["exposed_comm_ms"] for r in rows.values())
    ratios = [runs[(model, link, "fp32", rnd)]["step_ms"] / r["step_ms"]
              for rnd, r in rows.items() if (model, link, "fp32", rnd) in runs]
    speed = (f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-")
    sent = max(r["sent_kib_per_step"] for r in rows.values())
    print(f"| {model} | {link} | {arm} | {step:.2f} | {exposed:.2f} | {sent:,.0f} | {speed} |")
PY
rm -f "$results"
