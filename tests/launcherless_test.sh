#!/bin/bash
# examples/minimal_ddp started without ddprun: by itself (--nprocs=2, Spawn) and under a real
# `mpirun -np 2 --oversubscribe` (MASTER_ADDR derived from OpenMPI's environment, Gloo backend). The
# mpirun half prints "SKIPPED: ..." when mpirun is not installed (tools/setup.sh installs it).
set -u
PROGRAM=examples/minimal_ddp

expect_two_ranks() {  # $1: what ran, $2: its exit code, $3: its output
  echo "$3" | tail -8
  [ "$2" -eq 0 ] || { echo "FAIL: $1 exited $2"; exit 1; }
  echo "$3" | grep -q "test accuracy .* on 2 ranks" || { echo "FAIL: $1 did not report 2 ranks"; exit 1; }
}

out=$(timeout 300 "$PROGRAM" --nprocs=2 2>&1)
expect_two_ranks "minimal_ddp --nprocs=2" $? "$out"
echo "PASS: minimal_ddp --nprocs=2 (Spawn)"

if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun is not installed (apt-get install openmpi-bin)"
  exit 0
fi
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
# No MASTER_ADDR: it is derived from OpenMPI's variables. As root OpenMPI needs the two ALLOW variables.
out=$(env -u MASTER_ADDR OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      timeout 300 mpirun -np 2 --oversubscribe -x MASTER_PORT="$PORT" "$PROGRAM" 2>&1)
expect_two_ranks "mpirun -np 2 minimal_ddp" $? "$out"
echo "PASS: mpirun -np 2 minimal_ddp"
