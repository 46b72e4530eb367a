#!/usr/bin/env bash
# Runs a command while N busy processes compete for the CPUs under ordinary scheduling (what a shared
# node looks like: another job, a loader, a compile), and stops them when the command ends, however it
# ends. Each busy process is a shell loop that never sleeps and makes no system call.
#
#   bash bench/contend.sh 1 bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 \
#       bazel-bin/bench/train_throughput --model=mlp --backend=shm
#   bash bench/contend.sh 2            # no command: the loops run until Ctrl-C or SIGTERM
#
# The command's exit status is this script's. N=0 runs the command alone.
set -uo pipefail
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: bench/contend.sh N [command [args...]]  (N: number of busy processes, 0 or more)" >&2
  exit 2
fi
n=$1
shift
busy_pids=()
stop_busy() {
  for pid in "${busy_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${busy_pids[@]}"; do wait "$pid" 2>/dev/null; done
  busy_pids=()
}
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((i = 0; i < n; ++i)); do
  bash -c 'trap "exit 0" TERM; while :; do :; done' &
  busy_pids+=($!)
done
if [[ $# -eq 0 ]]; then
  while :; do sleep 3600 & wait $!; done
fi
"$@"
