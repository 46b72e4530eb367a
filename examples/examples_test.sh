#!/bin/bash
# Runs every program in examples/ the way its top comment says, so none of them rots: minimal_ddp,
# custom_model, comm_hook and two_input_model on 2 ranks under ddprun, data_parallel as one process.
# Each must exit 0 and print its result line: ranks that agree where there are ranks, and a loss that
# fell (below 1.0, from about 2.3 for the Fashion-MNIST programs and 1.4 for data_parallel).
set -u
DDPRUN=launch/ddprun

# $1: what ran, $2: its exit code, $3: its output, $4: an extended regex its result line must match.
check() {
  echo "$3" | tail -3
  [ "$2" -eq 0 ] || { echo "FAIL: $1 exited $2"; exit 1; }
  local line
  line=$(echo "$3" | grep -E -- "$4" | tail -1)
  [ -n "$line" ] || { echo "FAIL: $1 printed no line matching /$4/"; exit 1; }
  local loss
  loss=$(echo "$line" | sed -n 's/.*final loss \([0-9.]*\).*/\1/p')
  if [ -n "$loss" ] && ! awk -v l="$loss" 'BEGIN { exit !(l < 1.0) }'; then
    echo "FAIL: $1 ended with loss $loss (expected below 1.0)"
    exit 1
  fi
  echo "PASS: $1"
}

# $1: a program in examples/, $2: as check's $4.
run_two_ranks() {
  local out
  out=$(timeout 120 "$DDPRUN" --nproc_per_node=2 --master_port=0 "examples/$1" 2>&1)
  check "ddprun --nproc_per_node=2 examples/$1" $? "$out" "$2"
}

run_two_ranks minimal_ddp '^\[rank 0\] test accuracy 0\.[7-9][0-9]* over 10000 samples on 2 ranks$'
run_two_ranks custom_model '^\[rank 0\] custom_model: 150 steps on 2 ranks, final loss .*\(ranks agree\)$'
run_two_ranks comm_hook '^\[rank 0\] comm_hook: 100 steps on 2 ranks, 2 buckets per step, .*\(ranks agree\)$'
run_two_ranks two_input_model \
  '^\[rank 0\] two_input_model: 150 steps on 2 ranks, 2 micro-batches of 32 per step, .*final loss .*\(ranks agree\)$'

out=$(timeout 60 examples/data_parallel 2>&1)
check "examples/data_parallel" $? "$out" \
  '^data_parallel: 2 CPU workers, batches of 64 scattered as 32 \+ 32, outputs and gradients within .*loss'
echo "PASS: all examples"
