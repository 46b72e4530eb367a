#!/usr/bin/env bash
# Validates the DDP step simulator against measured bucket sweeps, end to end:
#   1. fits the loopback link from bench/allreduce (2 ranks, Gloo) -> link_loopback.json (with --backends
#      naming shm: the same run also times ProcessGroupShm on NewCommBuffer tensors, as DDP's buckets are
#      (Note [Zero-copy all-reduce]) -> link_loopback_shm.json)
#      (for real-time loopback sweeps also with both ranks pinned to one core -> link_loopback_one_core[_shm].json,
#      the shared-core link of Note [Simulated schedule] step 6)
#   2. traces 400 steps of bench/train_throughput (2 ranks, default caps: the program the sweeps run, with
#      the same pre-loaded batches) per model -> profile_<model>.json (and per model over shm ->
#      profile_<model>_shm.json). Not train/train: its data loading on the training thread would count as
#      compute the sweeps do not have.
#   3. runs bench/bucket_sweep.sh --repeats times per model on loopback (per backend of --backends), and per
#      --netns_models model over a network-namespace link at each of --rates, the runs interleaved ->
#      sweeps/r<k>/bucket_sweep_<tag>.csv (tags: <model>, <model>_shm, <model>_netns_<rate>)
#   4. predicts every sweep row against the median of the runs (ddp_sim validate) -> validation_<tag>.{csv,txt},
#      and plots them all -> validation.png
# With --interleaved, steps 2 and 3 are one run per sweep: bench/bucket_sweep.sh --interleaved runs every
# configuration in rotating blocks in one pair of processes for --rounds rounds (Note [Interleaved sweep])
# and traces it, and the profile is read from that trace's timed blocks, every configuration's (`ddp_sim
# profile --iterations`: the compute side hardly depends on the caps, and one configuration's blocks would
# carry that row's noise into every prediction), so the profile and every row of its sweep are measured in
# the same minutes -> sweeps/interleaved/ and profile_<tag>.json. --steps is then the steps per block
# (bench/bucket_sweep.sh's defaults: 40 for the mlp, 15 for the cnns).
# Everything runs at real-time priority (chrt -f 5), as BENCHMARKS.md's all-reduce table does: on this shared
# 2-core machine other jobs otherwise move step times between configurations more than the caps do. Under
# SCHED_FIFO the two ranks' compute threads hold both cores during backward and no Gloo thread can take one
# from them: an all-reduce runs only once the first rank has ended backward and waits, on the core it freed.
# The simulator is told so (--comm_after_first_backward, Note [Simulated schedule] step 6), rather than
# --no_overlap, which would hold every all-reduce until this rank's own end of backward. --normal_priority
# runs everything at normal priority instead and predicts with overlap (what a user's job does: the
# communication threads time-share the cores with compute); meant with --interleaved, whose rotation takes
# over the job of keeping other tenants' load off the comparison. --predict_only reads which it was from
# $OUT/priority.
#
#   bash bench/validate_sim.sh [--out=DIR] [--steps=100] [--repeats=3] [--models=cnn,mlp] [--no_netns]
#                        [--netns_models=cnn] [--rates=1gbit[,100mbit]] [--no_loopback] [--backends=gloo[,shm]]
#                        [--interleaved [--rounds=10]] [--normal_priority]
# --backends: the loopback sweeps' backends (Gloo over TCP, ProcessGroupShm); the namespace links are Gloo.
# --no_loopback skips the loopback sweeps (the link fit and the profiles still run: the namespace rows need them).
# --plot_only redraws validation.png from the validation CSVs already in --out; --predict_only redoes step 4
# (and the plot) from the link, profiles and sweeps already in --out.
# The namespace link needs root and iproute2 (bench/bucket_sweep.sh --netns). About 6 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=results/sim STEPS="" ROUNDS=10 INTERLEAVED=0 NORMAL_PRIORITY=0 REPEATS=3 MODELS=cnn,mlp NETNS=1 NETNS_MODELS=cnn RATES=1gbit LOOPBACK=1 PLOT_ONLY=0 PREDICT_ONLY=0
BACKENDS=gloo
for arg in "$@"; do
  case "$arg" in
    --out=*) OUT="${arg#*=}" ;;
    --steps=*) STEPS="${arg#*=}" ;;
    --repeats=*) REPEATS="${arg#*=}" ;;
    --models=*) MODELS="${arg#*=}" ;;
    --no_netns) NETNS=0 ;;
    --rates=* | --rate=*) RATES="${arg#*=}" ;;
    --netns_models=*) NETNS_MODELS="${arg#*=}" ;;
    --no_loopback) LOOPBACK=0 ;;
    --backends=*) BACKENDS="${arg#*=}" ;;
    --plot_only) PLOT_ONLY=1 ;;
    --predict_only) PREDICT_ONLY=1 ;;
    --interleaved) INTERLEAVED=1 ;;
    --rounds=*) ROUNDS="${arg#*=}" ;;
    --normal_priority) NORMAL_PRIORITY=1 ;;
    *) echo "validate.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
for backend in ${BACKENDS//,/ }; do
  [[ $backend == gloo || $backend == shm ]] || { echo "validate.sh: --backends takes gloo and shm, not $backend" >&2; exit 2; }
done
[[ $INTERLEAVED == 1 ]] && REPEATS=1  # the rounds inside the one run take the repeats' place
STEPS_FLAG=()
[[ -n $STEPS ]] && STEPS_FLAG=(--steps="$STEPS")
[[ -z $STEPS && $INTERLEAVED == 0 ]] && STEPS_FLAG=(--steps=100)
SHM=0
[[ ",$BACKENDS," == *,shm,* ]] && SHM=1
suffix() { [[ $1 == gloo ]] || echo "_$1"; }  # the tag suffix of a backend (bench/bucket_sweep.sh's)
TAGS=()
if [[ $LOOPBACK == 1 ]]; then
  for backend in ${BACKENDS//,/ }; do for model in ${MODELS//,/ }; do TAGS+=("$model$(suffix "$backend")"); done; done
fi
if [[ $NETNS == 1 ]]; then
  for rate in ${RATES//,/ }; do for model in ${NETNS_MODELS//,/ }; do TAGS+=("${model}_netns_$rate"); done; done
fi
PROFILE_MODELS=$(echo "${MODELS//,/ } ${NETNS_MODELS//,/ }" | tr ' ' '\n' | sort -u | tr '\n' ' ')

plot_validation() {
  local plot=""
  for tag in "${TAGS[@]}"; do
    local how="median of $REPEATS sweeps"
    [[ $INTERLEAVED == 1 ]] && how="one interleaved sweep, median of $ROUNDS rounds"
    plot+="set title \"$tag: 2 ranks, $how\"; plot \"$OUT/validation_$tag.csv\" every ::1 using 3:xtic(2) title \"measured\", '' every ::1 using 4 title \"predicted\";"$'\n'
  done
  gnuplot <<GP
set terminal pngcairo size 1100,$((300 * ${#TAGS[@]})) noenhanced
set output "$OUT/validation.png"
set datafile separator ","
set multiplot layout ${#TAGS[@]},1
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "ms per step"
set yrange [0:*]
set xtics rotate by -15
set key outside right top
$plot
unset multiplot
GP
  echo "wrote $OUT/validation.png"
}
if [[ $PLOT_ONLY == 1 ]]; then plot_validation; exit 0; fi

bazel build //sim:ddp_sim //bench:allreduce //bench:train_throughput //bench:bucket_sweep_interleaved //launch:ddprun //train:train
mkdir -p "$OUT"
if [[ $PREDICT_ONLY == 1 && -e $OUT/priority ]]; then
  [[ $(cat "$OUT/priority") == normal ]] && NORMAL_PRIORITY=1
fi
RT="chrt -f 5" OVERLAP_FLAG=(--comm_after_first_backward)
[[ $NORMAL_PRIORITY == 1 ]] && RT="" OVERLAP_FLAG=()
SIM=bazel-bin/sim/ddp_sim
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

if [[ $PREDICT_ONLY == 0 ]]; then
# 1 and 2: the link and the compute side, each measured once.
IMPLS=ours,raw
[[ $SHM == 1 ]] && IMPLS=ours,raw,shm_buf  # DDP's buckets come from NewCommBuffer: shm_buf is their link
if [[ $NORMAL_PRIORITY == 1 ]]; then echo normal > "$OUT/priority"; else echo realtime > "$OUT/priority"; fi
$RT bazel-bin/bench/allreduce --world_sizes=2 --impls=$IMPLS --format=json > "$OUT/allreduce_loopback.jsonl"
$SIM fit --bench="$OUT/allreduce_loopback.jsonl" --out="$OUT/link_loopback.json"
[[ $SHM == 1 ]] && $SIM fit --bench="$OUT/allreduce_loopback.jsonl" --impl=shm_buf --backend=shm --out="$OUT/link_loopback_shm.json"
if [[ $NORMAL_PRIORITY == 0 && $LOOPBACK == 1 ]]; then
  # The shared-core link of Note [Simulated schedule] step 6: the same all-reduces with both ranks on one
  # core. On loopback the communication is the CPU copying, so one core is slower than two.
  taskset -c 0 $RT bazel-bin/bench/allreduce --world_sizes=2 --impls=$IMPLS --format=json > "$OUT/allreduce_loopback_one_core.jsonl"
  $SIM fit --bench="$OUT/allreduce_loopback_one_core.jsonl" --out="$OUT/link_loopback_one_core.json"
  [[ $SHM == 1 ]] && $SIM fit --bench="$OUT/allreduce_loopback_one_core.jsonl" --impl=shm_buf --backend=shm \
    --out="$OUT/link_loopback_one_core_shm.json"
fi
profile() {  # profile MODEL BACKEND
  local name="$1$(suffix "$2")"
  timeout 600 $RT bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/train_throughput --model="$1" \
    --backend="$2" --warmup=20 --steps=380 --trace_out="$TMP/trace_$name.json" > /dev/null
  $SIM profile --trace="$TMP/trace_$name.json" --model="$1" --skip=20 --out="$OUT/profile_$name.json"
}
if [[ $INTERLEAVED == 0 ]]; then
  for model in $PROFILE_MODELS; do profile "$model" gloo; done
  if [[ $SHM == 1 && $LOOPBACK == 1 ]]; then
    for model in ${MODELS//,/ }; do profile "$model" shm; done
  fi
fi

# 3: the sweeps (interleaved: each with its own profile).
sweep() {  # sweep MODEL TAG bucket_sweep.sh-flags...
  local model="$1" tag="$2"; shift 2
  if [[ $INTERLEAVED == 0 ]]; then
    $RT bash bench/bucket_sweep.sh --model="$model" "${STEPS_FLAG[@]}" --out="$OUT/sweeps/r$k" "$@" > /dev/null
    return
  fi
  $RT bash bench/bucket_sweep.sh --model="$model" "${STEPS_FLAG[@]}" --out="$OUT/sweeps/interleaved" --interleaved \
    --rounds="$ROUNDS" --trace_out="$OUT/sweeps/interleaved/trace_$tag.json" "$@" > /dev/null
}
for ((k = 1; k <= REPEATS; k++)); do
  if [[ $LOOPBACK == 1 ]]; then
    for backend in ${BACKENDS//,/ }; do
      for model in ${MODELS//,/ }; do
        sweep "$model" "$model$(suffix "$backend")" --backend="$backend"
      done
    done
  fi
  if [[ $NETNS == 1 ]]; then
    for rate in ${RATES//,/ }; do
      for model in ${NETNS_MODELS//,/ }; do
        sweep "$model" "${model}_netns_$rate" --netns --rate="$rate"
      done
    done
  fi
done
rm -f "$OUT"/sweeps/*/*.png  # the per-sweep plots; validation.png shows them all
fi

# 4: predictions against the medians.
csvs() {
  if [[ $INTERLEAVED == 1 ]]; then echo "$OUT/sweeps/interleaved/bucket_sweep_$1.csv"; return; fi
  local list=""; for ((k = 1; k <= REPEATS; k++)); do list+="${list:+,}$OUT/sweeps/r$k/bucket_sweep_$1.csv"; done; echo "$list"
}
# The profile of an interleaved sweep: its trace's timed blocks, every configuration's. The traces (tens of
# MB) are not kept in git (.gitignore): without one, the profile already in --out stands.
profile_from_sweep() {  # profile_from_sweep TAG MODEL
  local dir="$OUT/sweeps/interleaved" iterations
  [[ ! -e $dir/trace_$1.json && -e $OUT/profile_$1.json ]] && return
  iterations=$(/usr/bin/python3 -c '
import json, sys
print(",".join(json.loads(line)["iterations"] for line in open(sys.argv[1])))' "$dir/bucket_sweep_$1.jsonl")
  $SIM profile --trace="$dir/trace_$1.json" --model="$2" --skip=0 --iterations="$iterations" --out="$OUT/profile_$1.json"
}
validate() {  # validate TAG PROFILE LINK_FLAGS... (interleaved: the sweep's own profile)
  local tag="$1" model="$2"; shift 2
  if [[ $INTERLEAVED == 1 ]]; then
    profile_from_sweep "$tag" "${model%_shm}"
    model="$tag"
  fi
  $SIM validate --profile="$OUT/profile_$model.json" --world_size=2 "${OVERLAP_FLAG[@]}" "$@" \
    --sweep_csv="$(csvs "$tag")" --out="$OUT/validation_$tag.csv" | tee "$OUT/validation_$tag.txt"
}
if [[ $LOOPBACK == 1 ]]; then
  for backend in ${BACKENDS//,/ }; do
    for model in ${MODELS//,/ }; do
      name="$model$(suffix "$backend")"
      shared_core=()
      one_core_link="$OUT/link_loopback_one_core$(suffix "$backend").json"
      [[ $NORMAL_PRIORITY == 0 && -e $one_core_link ]] && shared_core=(--shared_core_link="$one_core_link")
      validate "$name" "$name" --link="$OUT/link_loopback$(suffix "$backend").json" "${shared_core[@]}"
    done
  done
fi
if [[ $NETNS == 1 ]]; then
  # The namespace link as a user gives a link we cannot measure: alpha per message from the loopback fit
  # (a ring of 2 sends 2 messages per all-reduce), bandwidth the tbf rate times TCP's payload share of an
  # Ethernet frame (1448 of 1514 bytes), and tbf's burst (256 KiB of frames, bench/bucket_sweep.sh) in
  # payload bytes: after an idle gap that much passes at line rate (Note [Token-bucket links]). No shared-core
  # link (Note [Simulated schedule] step 6): the wire limits these links, not the CPU, and both ranks pinned to
  # one core time the same all-reduces (`bash bench/netns_allreduce.sh --realtime [--one_core]`, BENCHMARKS.md).
  burst_kib=$(/usr/bin/python3 -c "print(256 * 1448 / 1514)")
  alpha_us=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/link_loopback.json'))['fits'][0]['alpha_s'] / 2 * 1e6)")
  for rate in ${RATES//,/ }; do
    gbps=$(/usr/bin/python3 -c "r='$rate'; m={'gbit':1e9,'mbit':1e6}; u=[k for k in m if r.endswith(k)][0]; print(float(r[:-len(u)]) * m[u] / 8 * 1448 / 1514 / 1e9)")
    for model in ${NETNS_MODELS//,/ }; do
      validate "${model}_netns_$rate" "$model" --alpha_us="$alpha_us" --gbps="$gbps" --burst_kib="$burst_kib"
    done
  done
fi

plot_validation
