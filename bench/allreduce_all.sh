#!/usr/bin/env bash
# One all-reduce table for every CPU backend (//bench:allreduce_all): per world size
# (--world_sizes, default 2,3,4) and message size (4 B, doubling, to --max_bytes, default 64 MiB), the median
# time per float32 sum all-reduce of
#   shm       our ProcessGroupShm                } bench/allreduce --impls=ours,raw,shm,shm_buf,floor
#   shm_buf   shm on NewCommBuffer tensors       } --settle_calls=1: the five interleaved in rotating
#   floor     shm_buf's algorithm, nothing else  } order, each timed call after one untimed call of the
#             (bench/shm_floor.h, the yardstick) } same impl (Note [Settle calls] in
#   gloo      our ProcessGroupGloo ("ours")      } bench/allreduce_bench.cc); max over ranks of each
#   raw gloo  gloo::allreduce ("raw")            } rank's median
#   mpi       our ProcessGroupMpi                } mpirun -np W --oversubscribe bench/backend_allreduce_bench
#   raw MPI   blocking MPI_Allreduce             } --backend=mpi, right after bench/allreduce; all mpi calls
#                                                  of a size, then all raw MPI calls; rank 0's median
# in --rounds rounds (default 3), each running both programs, so that drift of the machine hits both alike:
# every time is the median over the rounds, every ratio the median of the rounds' own ratios. Ratios:
# shm/gloo and shm/raw MPI (below 1: shm is faster; ">= 10x Gloo" is shm/gloo <= 0.1) and
# shm_buf/floor (1: as fast as the leanest program of the same algorithm). The table goes to stdout and to
# DIR/allreduce_all.md and .csv; the programs' own outputs are kept beside them
# (allreduce_rows_r<round>.json, mpi_w<W>_r<round>.txt) and the table's head names the commands.
#
#   bazel run //bench:allreduce_all -- [--world_sizes=2,3,4] [--max_bytes=67108864] [--target_ms=50]
#                                      [--rounds=3] [--out=DIR]
#   chrt -f 5 bazel-bin/bench/allreduce_all ...   # real-time priority, as BENCHMARKS.md's all-reduce runs
#
# --target_ms is the time spent per impl and size in both programs (a round of world 2 takes about 20 s on
# 2 cores; world 3 and 4 oversubscribe them). Without mpirun the mpi columns read "n/a" with the reason and
# the script still succeeds; a failed mpirun is named above the table (that world's MPI cells come from
# the other rounds, "n/a" when none) and the script exits 1 after printing the table. As root, OpenMPI's
# allow-run-as-root variables are set.
set -uo pipefail

runfile() {
  local path="$1"
  for base in "${RUNFILES_DIR:-}" "$0.runfiles" "${TEST_SRCDIR:-}"; do
    if [[ -n "$base" && -e "$base/ddpengine/$path" ]]; then echo "$base/ddpengine/$path"; return; fi
  done
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  if [[ -e "$root/bazel-bin/$path" ]]; then echo "$root/bazel-bin/$path"; else echo "$root/$path"; fi
}

WORLDS=2,3,4 MAX_BYTES=67108864 TARGET_MS=50 ROUNDS=3 OUT="${BUILD_WORKSPACE_DIRECTORY:-$PWD}/bench_out"
for arg in "$@"; do
  case "$arg" in
    --world_sizes=*) WORLDS="${arg#*=}" ;;
    --max_bytes=*) MAX_BYTES="${arg#*=}" ;;
    --target_ms=*) TARGET_MS="${arg#*=}" ;;
    --rounds=*) ROUNDS="${arg#*=}" ;;
    --out=*) OUT="${arg#*=}" ;;
    *) echo "allreduce_all: unknown argument $arg (see the header of bench/allreduce_all.sh)" >&2; exit 2 ;;
  esac
done
[[ $WORLDS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "allreduce_all: bad --world_sizes=$WORLDS" >&2; exit 2; }
[[ $MAX_BYTES =~ ^[0-9]+$ && $MAX_BYTES -ge 4 ]] || { echo "allreduce_all: bad --max_bytes=$MAX_BYTES" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "allreduce_all: bad --rounds=$ROUNDS" >&2; exit 2; }
ALLREDUCE="$(runfile bench/allreduce)"
BACKEND_BENCH="$(runfile bench/backend_allreduce_bench)"
TABLE="$(runfile bench/allreduce_table.py)"
mkdir -p "$OUT"

sizes="4"
for ((b = 8; b <= MAX_BYTES; b *= 2)); do sizes="$sizes,$b"; done
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
notes=("Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($cpu), load $(cut -d' ' -f1-3 /proc/loadavg) at the start.")

ours_cmd=("$ALLREDUCE" --world_sizes="$WORLDS" --max_bytes="$MAX_BYTES" --target_ms="$TARGET_MS"
  --impls=ours,raw,shm,shm_buf,floor --settle_calls=1 --format=json)
have_mpi=1
if ! command -v mpirun >/dev/null 2>&1; then
  echo "allreduce_all: mpirun not found: the mpi and raw MPI columns are n/a (apt-get install openmpi-bin)" >&2
  have_mpi=0
fi
# OpenMPI refuses to run as root unless both variables are set.
[[ $EUID == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
IFS=, read -ra worlds <<<"$WORLDS"
ours_args=() mpi_args=() ours_rc=0
# Rounds alternate the two programs, so that the machine's drift (large within an hour on a shared
# machine) hits both alike; each cell is the median over the rounds.
for ((round = 1; round <= ROUNDS; round++)); do
  echo "allreduce_all: round $round/$ROUNDS: ${ours_cmd[*]##*/}" >&2
  "${ours_cmd[@]}" >"$OUT/allreduce_rows_r$round.json"
  rc=$?
  ours_args+=(--allreduce="$OUT/allreduce_rows_r$round.json")
  [[ $rc == 0 ]] || { notes+=("bench/allreduce exited $rc in round $round: its rows may be incomplete."); ours_rc=1; }
  [[ $have_mpi == 1 ]] || continue
  for w in "${worlds[@]}"; do
    echo "allreduce_all: round $round/$ROUNDS: mpirun -np $w --oversubscribe backend_allreduce_bench --backend=mpi" >&2
    timeout 3600 mpirun -np "$w" --oversubscribe "$BACKEND_BENCH" --backend=mpi --bytes="$sizes" \
      --warmup=2 --target_ms="$TARGET_MS" >"$OUT/mpi_w${w}_r$round.txt" 2>"$OUT/mpi_w${w}_r$round.err"
    rc=$?
    if [[ $rc == 0 ]]; then
      mpi_args+=(--mpi="$w:$round:$OUT/mpi_w${w}_r$round.txt")
    else
      tail -3 "$OUT/mpi_w${w}_r$round.err" >&2
      mpi_args+=(--mpi_failed="$w:mpirun -np $w exited $rc in round $round (see mpi_w${w}_r$round.err)")
      ours_rc=1
    fi
  done
done
notes+=("Columns shm, shm_buf, floor, gloo, raw gloo: \`bench/allreduce --world_sizes=$WORLDS --max_bytes=$MAX_BYTES"\
" --target_ms=$TARGET_MS --impls=ours,raw,shm,shm_buf,floor --settle_calls=1 --format=json\` (impls interleaved"\
" in rotating order, each timed call after one untimed call of the same impl; max over ranks of the median;"\
" rows in allreduce_rows_r<round>.json).")
if [[ $have_mpi == 1 ]]; then
  notes+=("Columns mpi, raw MPI: \`mpirun -np W --oversubscribe bench/backend_allreduce_bench --backend=mpi"\
" --bytes=<the same sizes> --warmup=2 --target_ms=$TARGET_MS\` (run after bench/allreduce in each round; all"\
" mpi calls of a size, then all raw MPI calls; rank 0's median; output in mpi_w<W>_r<round>.txt).")
else
  mpi_args+=(--mpi_missing="mpirun is not installed (apt-get install openmpi-bin)")
fi
notes+=("$ROUNDS rounds, each running bench/allreduce and then the MPI runs; every time is the median over"\
" the rounds, every ratio the median of the rounds' ratios (each from one round's two runs, minutes apart).")
notes+=("shm/gloo and shm/raw MPI are time ratios: below 1 means shm is faster (0.1 = 10x).")

note_args=()
for note in "${notes[@]}"; do note_args+=(--note="$note"); done
/usr/bin/python3 "$TABLE" "${ours_args[@]}" "${mpi_args[@]}" "${note_args[@]}" \
  --md="$OUT/allreduce_all.md" --csv="$OUT/allreduce_all.csv" || exit 1
echo "wrote $OUT/allreduce_all.md and $OUT/allreduce_all.csv" >&2
exit "$ours_rc"
