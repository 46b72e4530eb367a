#!/bin/bash
# train/train --backend=mpi under a real `mpirun -np 2 --oversubscribe` trains the same model as
# --backend=gloo under the same mpirun (MASTER_ADDR derived from OpenMPI's variables): train loss, test
# loss and test accuracy agree within rounding (1e-4). Prints "SKIPPED: ..." and passes when mpirun is
# not installed (tools/setup.sh installs openmpi-bin).
set -u
TRAIN=train/train
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: mpirun is not installed (apt-get install openmpi-bin)"
  exit 0
fi
# OpenMPI refuses to run as root unless both variables are set; the library never sets them itself.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export DDP_TIMEOUT_S=60
OUT=${TEST_TMPDIR:-$(mktemp -d)}
ARGS=(--model=mlp --epochs=1 --max_steps=60 --seed=3 --num_workers=0)

for backend in mpi gloo; do
  PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  out=$(timeout 120 mpirun -np 2 --oversubscribe -x MASTER_PORT="$PORT" -x DDP_TIMEOUT_S \
        "$TRAIN" "${ARGS[@]}" --backend="$backend" --metrics_out="$OUT/$backend.jsonl" 2>&1)
  rc=$?
  echo "$out" | grep -E "^DDP:|final" 
  [ "$rc" -eq 0 ] || { echo "$out" | tail -8; echo "FAIL: --backend=$backend exited $rc"; exit 1; }
  echo "$out" | grep -q "DDP: 2 ranks over $backend" || { echo "FAIL: --backend=$backend did not run on 2 ranks"; exit 1; }
done

/usr/bin/python3 - "$OUT/mpi.jsonl" "$OUT/gloo.jsonl" <<'PY' || exit 1
import json, sys
mpi, gloo = (json.loads(open(path).read().splitlines()[-1]) for path in sys.argv[1:])
for key in ("train_loss", "test_loss", "test_acc"):
    print(f"{key}: mpi {mpi[key]:.6f} gloo {gloo[key]:.6f}")
    if abs(mpi[key] - gloo[key]) > 1e-4:
        sys.exit(f"FAIL: {key} differs between --backend=mpi and --backend=gloo")
if mpi["world_size"] != 2 or mpi["steps"] != 60:
    sys.exit(f"FAIL: the mpi run was {mpi['steps']} steps at world size {mpi['world_size']}")
PY
echo "PASS: --backend=mpi matches --backend=gloo"
