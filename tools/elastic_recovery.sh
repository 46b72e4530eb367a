#!/usr/bin/env bash
# Recovery time after a lost rank (BENCHMARKS.md, "Elastic recovery"): the cnn at 3 ranks, rank 2
# SIGKILLed during the backward pass of step 110; the time from its death to the completion of step 110
# by the job (the times the killed rank and rank 0 print, train/fault_injection.h), for
#   elastic    ddprun --elastic + train --elastic: the survivors regroup and go on at 2 ranks;
#   restart50  ddprun --max_restarts=1 + --resume: every worker restarts from the checkpoint of step 60;
#   restart0   the same from a checkpoint of step 109 (the restart's own cost, no step redone);
#   rejoin     ddprun --elastic --max_restarts=1 + train --elastic: the survivors go on at 2 ranks while
#              ddprun starts a replacement in rank 2's slot, which joins at the next step boundary after it
#              registered; measured from the death to the completion of the first step at 3 ranks again
#              (rank 0's "completed at ..., the first with the replacement(s)"), 200 steps in all.
# Runs are interleaved (in the order of MODES) ROUNDS times (default 3) under SCHED_FIFO (chrt -f 5) when
# root. Prints one line per run and the median and range per mode.
# Usage: bash tools/elastic_recovery.sh [ROUNDS] [BACKEND] [MODES]   (MODES default "elastic restart50
# restart0"; builds //train:train and //launch:ddprun)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BACKEND=${2:-shm}
read -r -a MODES <<<"${3:-elastic restart50 restart0}"
bazel build //train:train //launch:ddprun >/dev/null 2>&1
DDPRUN=bazel-bin/launch/ddprun
TRAIN=bazel-bin/train/train
PRIO=()
if [[ $(id -u) -eq 0 ]]; then PRIO=(chrt -f 5); fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

base=(--model=cnn --epochs=1 --lr_schedule=constant --backend="$BACKEND"
      --fault_inject_rank=2 --fault_inject_point=backward --fault_inject_step=109)
common=("${base[@]}" --max_steps=112)

# One run of `mode`; prints the seconds from the death to step 110's completion.
run() {
  local mode=$1 dir="$WORK/$1_$2" out="$WORK/$1_$2.out"
  mkdir -p "$dir"
  case $mode in
    elastic) "${PRIO[@]}" "$DDPRUN" --master_port=0 --elastic --nproc_per_node=3 "$TRAIN" "${common[@]}" --elastic >"$out" 2>&1 ;;
    restart50) "${PRIO[@]}" "$DDPRUN" --master_port=0 --max_restarts=1 --nproc_per_node=3 "$TRAIN" "${common[@]}" \
                 --checkpoint_dir="$dir" --checkpoint_every=60 --resume >"$out" 2>&1 ;;
    restart0) "${PRIO[@]}" "$DDPRUN" --master_port=0 --max_restarts=1 --nproc_per_node=3 "$TRAIN" "${common[@]}" \
                --checkpoint_dir="$dir" --checkpoint_every=109 --resume >"$out" 2>&1 ;;
    rejoin) "${PRIO[@]}" "$DDPRUN" --master_port=0 --elastic --max_restarts=1 --nproc_per_node=3 "$TRAIN" "${base[@]}" \
              --max_steps=200 --elastic >"$out" 2>&1 ;;
  esac
  local died done_at
  died=$(grep -o 'fault injection at [0-9.]*' "$out" | head -1 | awk '{print $4}')
  if [[ $mode == rejoin ]]; then
    done_at=$(grep -o 'completed at [0-9.]*, the first with the replacement' "$out" | tail -1 | awk '{print $3}' | tr -d ,)
  else
    done_at=$(grep -o 'step 110 completed at [0-9.]*' "$out" | tail -1 | awk '{print $5}')
  fi
  if [[ -z "$died" || -z "$done_at" ]]; then echo "$mode: no measurement, see output:" >&2; tail -20 "$out" >&2; exit 1; fi
  awk -v a="$died" -v b="$done_at" 'BEGIN { printf "%.3f\n", b - a }'
}

echo "date: $(date -u)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cores), backend $BACKEND"
declare -A results
for ((r = 1; r <= ROUNDS; ++r)); do
  for mode in "${MODES[@]}"; do
    t=$(run "$mode" "$r")
    echo "round $r $mode ${t}s"
    results[$mode]+="$t "
  done
done
for mode in "${MODES[@]}"; do
  echo "${results[$mode]}" | tr ' ' '\n' | grep . | sort -n | awk -v m="$mode" \
    '{ v[NR] = $1 } END { printf "%-10s median %.3f s, range %.3f-%.3f s over %d runs\n", m, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
done
