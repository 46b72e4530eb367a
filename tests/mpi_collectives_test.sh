#!/bin/bash
# ProcessGroupMpi under a real `mpirun --oversubscribe` (tests/mpi_collective_worker.cc): every collective
# against a sequential reference at 2 and 3 ranks, the checker's self-test (a perturbed result must fail),
# and the timeout path (rank 0 alone in a barrier: DeadlineExceeded naming it, then MPI_Abort at exit).
# Prints "SKIPPED: ..." and passes when mpirun is not installed (tools/setup.sh installs openmpi-bin).
set -u
WORKER=tests/mpi_collective_worker
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun is not installed (apt-get install openmpi-bin)"
  exit 0
fi
# OpenMPI refuses to run as root unless both variables are set; the library never sets them itself.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export DDP_TIMEOUT_S=30

for np in 2 3; do
  out=$(timeout 120 mpirun -np "$np" --oversubscribe "$WORKER" 2>&1)
  rc=$?
  echo "$out" | tail -5
  [ "$rc" -eq 0 ] || { echo "FAIL: mpirun -np $np exited $rc"; exit 1; }
  passed=$(echo "$out" | grep -c "MPI CHECKS PASSED rank ./$np")
  [ "$passed" -eq "$np" ] || { echo "FAIL: $passed of $np ranks passed at -np $np"; exit 1; }
  echo "PASS: every collective at $np ranks"
done

out=$(timeout 120 mpirun -np 2 --oversubscribe "$WORKER" --corrupt_at_rank=1 2>&1)
rc=$?
[ "$rc" -ne 0 ] && echo "$out" | grep -q "MISMATCH AllReduce(sum)" ||
  { echo "$out" | tail -5; echo "FAIL: a perturbed all-reduce result was not reported (exit $rc)"; exit 1; }
echo "PASS: the checker reports a perturbed result"

out=$(DDP_TIMEOUT_S=5 timeout 60 mpirun -np 2 --oversubscribe "$WORKER" --timeout_check 2>&1)
rc=$?
echo "$out" | head -3
echo "$out" | grep -q "TIMEOUT CHECK PASSED" || { echo "FAIL: the timeout check did not pass"; exit 1; }
echo "$out" | grep -q "calling MPI_Abort" || { echo "FAIL: no MPI_Abort after a stuck collective"; exit 1; }
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0 after MPI_Abort"; exit 1; }
echo "PASS: timeout names the collective and rank, later works fail at once, MPI_Abort ends the job"
