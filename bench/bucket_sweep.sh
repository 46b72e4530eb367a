#!/usr/bin/env bash
# Bucket-size sweep for DDP on 2 ranks (//bench:bucket_sweep): runs a model for bucket caps 0 (one
# bucket per parameter), 0.0625, 0.25, 1, 5, 25 and 100 MiB (resnet18: 0, 0.25, 1, 5, 10, 15, 25 and 50;
# first bucket cap = bucket cap), PyTorch's
# default layout (first 1 MiB, then 25 MiB), the caps --bucket_cap_mb=auto chooses (row "auto F/C";
# train/auto_bucket_caps.h), and two ablations: "single_allreduce" (one bucket reduced
# after backward) and "no_overlap" (default buckets, all reduced after backward). Prints a table
# (cap, buckets, step ms, comm ms, exposed comm ms), writes CSV and a PNG plot (gnuplot).
#
#   bazel run //bench:bucket_sweep -- [--model=cnn] [--steps=100] [--out=DIR] [--netns [--rate=1gbit]]
#                                     [--comm_hook=none|fp16|bf16|powersgd] [--backend=gloo|shm]
#                                     [--interleaved [--rounds=10] [--trace_out=FILE]] [--time_limit_s=N]
#
# --time_limit_s bounds each pair of processes (one configuration, or the whole interleaved run); it
# defaults to 1200 s, and for --interleaved to 400 s per round when that is more (a round of resnet18's 12
# configurations takes about 240 s at 100 Mbit/s). A run killed at the limit is reported as such.
#
# --interleaved runs every configuration in one pair of processes (bench/bucket_sweep_interleaved.cc, Note
# [Interleaved sweep]): --rounds rounds of --steps timed steps per configuration (default 40 for the mlp,
# 15 for the cnns, 2 for resnet18, whose steps take seconds), each row the median over the rounds, so that
# the machine's drift over minutes falls on every configuration alike. --trace_out keeps a Chrome trace of the whole run; each JSON row names its
# timed iterations, which `ddp_sim profile --iterations` reads; the rows are also kept as
# bucket_sweep_<tag>.jsonl beside the CSV.
#
# --backend (default gloo: Gloo over loopback TCP, the sweeps BENCHMARKS.md shows) is passed to every
# bench/train_throughput run; shm is ProcessGroupShm (comm/shm/process_group_shm.h), and tags the outputs
# "<model>_shm[_<hook>]" (gloo keeps the untagged names). The auto row works over shm as over Gloo: its
# link probes are all-reduces through the run's own group, so they measure shm. --netns with
# --backend=shm is refused: the namespaces separate the network only, the two ranks still share one host
# and its /dev/shm, so shm would bypass the rate-limited veth link the option exists to impose.
#
# --comm_hook runs every configuration with that DDP comm hook (PowerSGD with rank 1, start_iter 10: the
# warm-up covers the plain iterations) and tags the outputs "<model>[_netns_<rate>|_shm]_<hook>"; the auto row
# is skipped (its link probes model the plain all-reduce). The JSON rows carry sent_kib_per_step.
#
# --netns runs the two ranks in two network namespaces joined by a veth pair whose both directions are
# limited by a token bucket (tc tbf) to --rate, so the bucket trade-off shows as between machines. It
# needs root and iproute2; the namespaces are always removed.
set -euo pipefail

runfile() {
  local path="$1"
  for base in "${RUNFILES_DIR:-}" "$0.runfiles" "${TEST_SRCDIR:-}"; do
    if [[ -n "$base" && -e "$base/ddpengine/$path" ]]; then echo "$base/ddpengine/$path"; return; fi
  done
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  if [[ -e "$root/bazel-bin/$path" ]]; then echo "$root/bazel-bin/$path"; else echo "$root/$path"; fi
}

MODEL=cnn STEPS="" OUT="${BUILD_WORKSPACE_DIRECTORY:-$PWD}/bench_out" NETNS=0 RATE=1gbit HOOK=none BACKEND=gloo
INTERLEAVED=0 ROUNDS=10 TRACE="" TIME_LIMIT_S=""
for arg in "$@"; do
  case "$arg" in
    --model=*) MODEL="${arg#*=}" ;;
    --steps=*) STEPS="${arg#*=}" ;;
    --out=*) OUT="${arg#*=}" ;;
    --netns) NETNS=1 ;;
    --rate=*) RATE="${arg#*=}" ;;
    --comm_hook=*) HOOK="${arg#*=}" ;;
    --backend=*) BACKEND="${arg#*=}" ;;
    --interleaved) INTERLEAVED=1 ;;
    --rounds=*) ROUNDS="${arg#*=}" ;;
    --trace_out=*) TRACE="${arg#*=}" ;;
    --time_limit_s=*) TIME_LIMIT_S="${arg#*=}" ;;
    *) echo "bucket_sweep: unknown argument $arg (see the header of bench/bucket_sweep.sh)" >&2; exit 2 ;;
  esac
done
if [[ -z $STEPS ]]; then
  STEPS=100
  [[ $INTERLEAVED == 1 && $MODEL == mlp ]] && STEPS=40
  [[ $INTERLEAVED == 1 && $MODEL != mlp ]] && STEPS=15
  [[ $MODEL == resnet18 ]] && STEPS=10
  [[ $INTERLEAVED == 1 && $MODEL == resnet18 ]] && STEPS=2
fi
# The caps swept, in MiB (first bucket cap = bucket cap). resnet18's 62 gradients (42.6 MiB) hold 9 MiB
# tensors, so its caps reach past the whole model (50 MiB: one bucket) and fill the 5-25 MiB range where
# its layouts change (6, 4, 3, 2 buckets); the small models' caps stop at 100 MiB.
CAPS="0 0.0625 0.25 1 5 25 100"
[[ $MODEL == resnet18 ]] && CAPS="0 0.25 1 5 10 15 25 50"
# resnet18's steps take seconds: the interleaved run's untimed steps are cut to what they are for (the
# first step's bucket rebuild and warm caches; one step after each layout switch; auto's measurement).
INTERLEAVED_SHORT=()
[[ $MODEL == resnet18 ]] && INTERLEAVED_SHORT=(--warmup=3 --block_warmup=1 --auto_caps_steps=5)
if [[ $INTERLEAVED == 1 && $HOOK != none ]]; then
  echo "bucket_sweep: --interleaved runs the plain all-reduce only (drop --comm_hook)" >&2
  exit 2
fi
if [[ $INTERLEAVED == 0 && ( -n $TRACE || $ROUNDS != 10 ) ]]; then
  echo "bucket_sweep: --rounds and --trace_out go with --interleaved" >&2
  exit 2
fi
if [[ -z $TIME_LIMIT_S ]]; then
  TIME_LIMIT_S=1200
  [[ $INTERLEAVED == 1 && $ROUNDS =~ ^[0-9]+$ ]] && (( ROUNDS * 400 > TIME_LIMIT_S )) && TIME_LIMIT_S=$((ROUNDS * 400))
fi
if ! [[ $TIME_LIMIT_S =~ ^[1-9][0-9]*$ ]]; then
  echo "bucket_sweep: --time_limit_s must be a positive number of seconds, not '$TIME_LIMIT_S'" >&2
  exit 2
fi
NETNS_RUN_LIMIT_S=$TIME_LIMIT_S
case "$BACKEND" in
  gloo | shm) ;;
  *) echo "bucket_sweep: --backend must be gloo or shm, not '$BACKEND'" >&2; exit 2 ;;
esac
if [[ $NETNS == 1 && $BACKEND == shm ]]; then
  echo "bucket_sweep: --netns needs --backend=gloo: both namespaces are still one host, so shm would share" \
    "memory and bypass the rate-limited link (drop --netns to sweep shm on this host)" >&2
  exit 2
fi
DDPRUN="$(runfile launch/ddprun)"
BENCH="$(runfile bench/train_throughput)"
mkdir -p "$OUT"
tag="$MODEL"
link_note=""
if [[ $NETNS == 1 ]]; then
  tag="${MODEL}_netns_${RATE}"
  link_note=", link $RATE"
fi
if [[ $BACKEND != gloo ]]; then
  tag="${tag}_${BACKEND}"
  link_note="${link_note}, backend $BACKEND"
fi
if [[ $HOOK != none ]]; then
  tag="${tag}_${HOOK}"
  link_note="${link_note}, comm hook $HOOK"
fi
CSV="$OUT/bucket_sweep_${tag}.csv"
PNG="$OUT/bucket_sweep_${tag}.png"

source "$(runfile bench/netns_link.sh)"
trap netns_link_down EXIT
if [[ $NETNS == 1 ]]; then
  netns_link_up "$RATE" || { echo "bucket_sweep: could not set up the --netns link" >&2; exit 2; }
fi

# Runs PROGRAM ARGS... on 2 ranks (over the namespace link with --netns), at most --time_limit_s seconds;
# prints rank 0's JSON lines, and says so on stderr when the limit killed the ranks.
run_ranks() {
  local status
  set +e
  if [[ $NETNS == 1 ]]; then
    netns_run_pair "$DDPRUN" -- "$@" | sed -n 's/^\[rank 0\] //p' | grep '^{'
  else
    DDP_TIMEOUT_S=120 timeout "$TIME_LIMIT_S" "$DDPRUN" --nproc_per_node 2 --master_port 0 "$@" 2>/dev/null \
      | sed -n 's/^\[rank 0\] //p' | grep '^{'
  fi
  status=("${PIPESTATUS[@]}")
  set -e
  if [[ ${status[0]} == 124 ]]; then
    echo "bucket_sweep: $(basename "$1") was killed at the time limit of ${TIME_LIMIT_S} s (--time_limit_s)" >&2
  fi
  [[ ${status[0]} != 0 ]] && return "${status[0]}"
  return "${status[2]}"
}

# Runs one configuration in its own pair of processes; prints rank 0's JSON line.
run_config() {
  run_ranks "$BENCH" --model="$MODEL" --steps="$STEPS" --comm_hook="$HOOK" --backend="$BACKEND" "$@"
}

rows=()
if [[ $INTERLEAVED == 1 ]]; then
  # One pair of processes runs every configuration in rotating blocks (Note [Interleaved sweep]); each JSON
  # line names its configuration.
  trace_flag=()
  [[ -n $TRACE ]] && trace_flag=(--trace_out="$TRACE")
  while IFS= read -r line; do
    rows+=("$(sed 's/^{"config": "\([^"]*\)".*/\1/' <<<"$line")|$line")  # the label is the row's first field
  done < <(run_ranks "$(runfile bench/bucket_sweep_interleaved)" --model="$MODEL" --backend="$BACKEND" \
             --rounds="$ROUNDS" --block_steps="$STEPS" --configs="${CAPS// /,},default,auto,single_allreduce,no_overlap" \
             "${INTERLEAVED_SHORT[@]}" "${trace_flag[@]}")
else
  for cap in $CAPS; do
    rows+=("$cap|$(run_config --bucket_cap_mb="$cap" --first_bucket_mb="$cap")")
  done
  rows+=("default 1/25|$(run_config --bucket_cap_mb=25 --first_bucket_mb=1)")
  # --bucket_cap_mb=auto: the choice (20 measured steps after 5 skipped, then 21 more for its report) happens
  # inside a longer untimed warm-up, so the timed steps all run under the chosen caps.
  if [[ $HOOK == none ]]; then  # auto's link probes and predictions assume the plain all-reduce
    rows+=("auto|$(run_config --auto_bucket_caps --auto_caps_steps=20 --warmup=50)")
  fi
  rows+=("single_allreduce|$(run_config --ablation=single_allreduce)")
  rows+=("no_overlap|$(run_config --ablation=no_overlap)")
fi
if [[ ${#rows[@]} == 0 ]]; then echo "bucket_sweep: the interleaved run printed no rows" >&2; exit 1; fi
# The interleaved run's JSON rows as printed (with each configuration's per-round times and iterations).
[[ $INTERLEAVED == 1 ]] && printf '%s\n' "${rows[@]}" | sed 's/^[^|]*|//' > "$OUT/bucket_sweep_${tag}.jsonl"

steps_note="$STEPS steps"
[[ $INTERLEAVED == 1 ]] && steps_note="interleaved: $ROUNDS rounds of $STEPS steps per configuration"
printf '%s\n' "${rows[@]}" | /usr/bin/python3 "$(runfile bench/bucket_sweep_report.py)" "$CSV" \
  "bucket sweep: $MODEL, 2 ranks, batch 64 per rank, $steps_note$link_note"

if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GP
set terminal pngcairo size 1000,500 noenhanced
set output "$PNG"
set datafile separator ","
set title "DDP bucket sweep: $tag (2 ranks)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "ms per step"
set xtics rotate by -30
set key outside top center horizontal
plot "$CSV" using 4:xtic(2) title "step", "" using 5 title "communication", "" using 6 title "exposed communication"
GP
  echo "wrote $CSV and $PNG"
else
  echo "wrote $CSV (gnuplot missing: no plot)"
fi
