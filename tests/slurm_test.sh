#!/bin/bash
# Real Slurm on this machine: starts munged, slurmctld and slurmd as a one-node cluster (configuration,
# key, state and logs in a temporary folder; ports picked free), then runs
#   1. srun -n 2 examples/minimal_ddp              (ranks from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID)
#   2. srun --mpi=pmix -n 2 train --backend=mpi    (rank and size from MPI, through srun's PMIx)
#   3. sbatch of the job script docs/launch.md shows (its one-node form), waited for with sbatch --wait
#   4. scancel of a running training job: SIGTERM, then SIGKILL after KillWait; every rank saves the agreed
#      step and exits 143, and srun --resume continues from that step. (`scancel JOB.STEP` without --signal
#      sends SIGKILL at once, checked here: use `scancel JOB`, `scancel --signal=TERM JOB.STEP`, or
#      `#SBATCH --signal=TERM@60` to let the ranks save.)
# and tears everything down. Prints "SKIPPED: ..." and passes when Slurm and munge are not installed
# (tools/setup.sh installs them) or when the daemons cannot run here (their log is printed).
set -u
for tool in munged slurmctld slurmd srun sbatch scancel sinfo; do
  if ! command -v "$tool" >/dev/null && [ ! -x "/usr/sbin/$tool" ]; then
    echo "SKIPPED: $tool is not installed (apt-get install slurmd slurmctld slurm-client munge)"
    exit 0
  fi
done
ROOT=$PWD
TRAIN=$ROOT/train/train
MINIMAL=$ROOT/examples/minimal_ddp
DIR=$(mktemp -d /tmp/ddp_slurm.XXXXXX)  # short: munge's socket path must fit in sun_path
chmod 700 "$DIR"
mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/work"
chmod 700 "$DIR/munge"

stop_daemons() {
  for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
}
trap 'stop_daemons; rm -rf "$DIR"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PATH=$PATH:/usr/sbin

# munged with its own key and socket, so nothing of the machine's own munge (if any) is touched.
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$DIR/munge/munge.key"
if ! munged --socket="$DIR/munge/sock" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
    --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/seed" -f; then
  echo "SKIPPED: munged cannot run here:"
  cat "$DIR/munge/munged.log"
  exit 0
fi

NODE=$(hostname -s)
CPUS=$(nproc)
cat >"$DIR/slurm.conf" <<CONF
ClusterName=ddptest
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
KillWait=30
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$DIR/slurm.conf
if ! slurmctld -i || ! slurmd; then
  echo "SKIPPED: slurmctld or slurmd cannot start here:"
  for log in "$DIR"/log/*.log; do echo "-- $log"; tail -n 20 "$log"; done
  exit 0
fi
ready=0
for _ in $(seq 150); do  # 30 s
  if [ "$(sinfo -h -n "$NODE" -o %T 2>/dev/null)" = idle ]; then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" -ne 1 ]; then
  echo "SKIPPED: the one-node cluster did not become idle within 30 s:"
  sinfo 2>&1
  for log in "$DIR"/log/*.log; do echo "-- $log"; tail -n 20 "$log"; done
  exit 0
fi
echo "== one-node Slurm cluster up: $(sinfo -h -o '%P %a %D %T %N')"
cd "$DIR/work"
# Under srun MASTER_PORT defaults to 29500; give each step its own so parallel tests cannot collide.
export DDP_TIMEOUT_S=60

# 1. minimal_ddp under srun: ranks and MASTER_ADDR from Slurm's variables.
#    Each task writes its own file, line-buffered, so a slow run shows how far it got.
MASTER_PORT=$(free_port) timeout 600 srun -n 2 --output="$DIR/work/minimal-%t.out" stdbuf -oL "$MINIMAL"
rc=$?
tail -n 3 minimal-0.out
[ "$rc" -eq 0 ] || { tail -n 5 minimal-*.out; fail "srun -n 2 minimal_ddp exited $rc"; }
grep -q "test accuracy .* on 2 ranks" minimal-0.out || fail "minimal_ddp did not train on 2 ranks"

# 2. train --backend=mpi under srun, the MPI library wired up through srun's PMIx.
out=$(timeout 300 srun --mpi=pmix -n 2 "$TRAIN" --model=mlp --epochs=1 --max_steps=20 --num_workers=0 \
      --backend=mpi 2>&1)
rc=$?
echo "$out" | grep -E "^DDP:|final" | head -3
[ "$rc" -eq 0 ] || { echo "$out" | tail -8; fail "srun --mpi=pmix -n 2 train --backend=mpi exited $rc"; }
echo "$out" | grep -q "DDP: 2 ranks over mpi" || fail "train --backend=mpi did not run on 2 ranks under srun"

# 3. The job script of docs/launch.md, one node.
cat >job.sbatch <<JOB
#!/bin/bash
#SBATCH --job-name=ddp-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --output=$DIR/work/job-%j.out
export MASTER_PORT=\$((20000 + SLURM_JOB_ID % 20000))
srun $TRAIN --model=mlp --epochs=1 --max_steps=20 --num_workers=0
JOB
out=$(timeout 300 sbatch --wait job.sbatch 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "sbatch --wait job.sbatch exited $rc"
grep -q "DDP: 2 ranks over" job-*.out || { cat job-*.out; fail "the sbatch job did not train on 2 ranks"; }

# 4. scancel of a running training job: SIGTERM, KillWait (30 s), SIGKILL. Every rank stops after the same
#    step, saves it and exits 143; srun --resume continues from it. Each task writes its own file
#    (--output=%t), as srun stops relaying output once its step is cancelled.
CKPT=$DIR/work/ckpt
ARGS=(--model=mlp --epochs=20 --num_workers=0 --checkpoint_dir="$CKPT" --checkpoint_every=100000)
MASTER_PORT=$(free_port) srun -n 2 --job-name=preempted --output="$DIR/work/step-%t.out" "$TRAIN" "${ARGS[@]}" \
  --log_samples="$DIR/work/samples" >/dev/null 2>&1 &
srun_pid=$!
for _ in $(seq 600); do  # 120 s for the first steps (a busy machine)
  [ -s "$DIR/work/samples" ] && [ "$(wc -l <"$DIR/work/samples")" -ge 20 ] && break
  sleep 0.2
done
job=$(squeue -h -n preempted -o %i | head -1)
if [ -z "$job" ]; then
  fail "the training job is not in squeue"
else
  scancel "$job"
fi
wait "$srun_pid"
echo "srun of the cancelled job exited $?"
for rank in 0 1; do
  grep -E "SIGTERM|CANCELLED" "step-$rank.out" | sed "s/^/  task $rank: /"
  grep -q "train: CANCELLED: stopped by SIGTERM after step" "step-$rank.out" || fail "rank $rank did not stop on SIGTERM"
done
stopped=$(cat step-0.out step-1.out | grep -oE "stopped by SIGTERM after step [0-9]+" | sort -u)
[ "$(echo "$stopped" | wc -l)" -eq 1 ] || fail "the ranks stopped after different steps: $stopped"
step=$(echo "$stopped" | grep -oE "[0-9]+$")
ls "$CKPT" 2>/dev/null | grep -q "step-$step" || fail "no checkpoint of step $step in $CKPT: $(ls "$CKPT" 2>&1)"
out=$(MASTER_PORT=$(free_port) timeout 300 srun -n 2 "$TRAIN" "${ARGS[@]}" --resume --max_steps=$((step + 5)) 2>&1)
rc=$?
[ "$rc" -eq 0 ] || { echo "$out" | tail -8; fail "srun --resume exited $rc"; }
echo "$out" | grep -q "resuming from .*: step $step," || fail "the resumed run did not continue from step $step"
echo "$out" | grep "resuming from" | head -2

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s); slurmctld and slurmd logs:"
  for log in "$DIR"/log/*.log; do echo "-- $log"; tail -n 15 "$log"; done
  exit 1
fi
echo "PASS"
