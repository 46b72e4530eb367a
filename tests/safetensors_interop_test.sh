#!/bin/bash
# PyTorch interop as users do it, both directions, for mlp and cnn_bn (BatchNorm buffers included):
#  1. PyTorch trains a few steps and saves with safetensors.torch.save_file(model.state_dict());
#     train/train --eval_only --init_from loads it and its test accuracy equals PyTorch's (within 0.002).
#  2. train/train trains a few steps with --save; PyTorch load_file + load_state_dict(strict=True)
#     loads it (num_batches_tracked and trained running statistics checked) and its accuracy equals ours.
# The PyTorch side is tests/safetensors_interop.py on /usr/bin/python3 with safetensors from
# /opt/ddpengine-py (tools/setup.sh). Prints "SKIPPED: ..." and passes when either cannot be imported.
set -u
TRAIN=train/train
PY=tests/safetensors_interop.py
export PYTHONPATH=/opt/ddpengine-py${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch"; exit 0
fi
if ! /usr/bin/python3 -c "import safetensors.torch" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import safetensors (tools/setup.sh installs it into /opt/ddpengine-py)"
  exit 0
fi
TMP=${TEST_TMPDIR:-$(mktemp -d)}
STEPS=30

# Prints the number after KEY in TEXT ("final test_acc 0.7386 ..." -> 0.7386).
value_after() { echo "$2" | sed -n "s/.*$1 \([0-9.]*\).*/\1/p" | tail -1; }

check_close() {  # name ours torch
  if [ -z "$2" ] || [ -z "$3" ]; then echo "FAIL: $1: missing accuracy (ours '$2', torch '$3')"; exit 1; fi
  if ! awk -v a="$2" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.002) }'; then
    echo "FAIL: $1: ours $2 vs torch $3 differ by more than 0.002"; exit 1
  fi
  echo "ok: $1: ours $2 torch $3"
}

for model in mlp cnn_bn; do
  # 1. PyTorch -> ours.
  out=$(/usr/bin/python3 "$PY" save "$model" "$TMP/torch_$model.safetensors" --steps=$STEPS 2>&1) ||
    { echo "$out"; echo "FAIL: PyTorch save ($model)"; exit 1; }
  out=$(/usr/bin/python3 "$PY" eval "$model" "$TMP/torch_$model.safetensors" 2>&1) ||
    { echo "$out"; echo "FAIL: PyTorch eval of its own file ($model)"; exit 1; }
  torch_acc=$(value_after "torch test_acc" "$out")
  out=$(timeout 300 "$TRAIN" --model="$model" --eval_only --init_from="$TMP/torch_$model.safetensors" 2>&1) ||
    { echo "$out"; echo "FAIL: train/train --init_from a PyTorch file ($model)"; exit 1; }
  ours_acc=$(value_after "final test_acc" "$out")
  check_close "PyTorch save_file -> ours --init_from ($model)" "$ours_acc" "$torch_acc"

  # 2. Ours -> PyTorch.
  out=$(timeout 300 "$TRAIN" --model="$model" --epochs=1 --max_steps=$STEPS --seed=1 \
        --save="$TMP/ours_$model.safetensors" 2>&1) ||
    { echo "$out"; echo "FAIL: train/train --save ($model)"; exit 1; }
  ours_acc=$(value_after "final test_acc" "$out")
  expect=()
  [ "$model" = cnn_bn ] && expect=(--expect_batches=$STEPS)
  out=$(/usr/bin/python3 "$PY" eval "$model" "$TMP/ours_$model.safetensors" "${expect[@]}" 2>&1) ||
    { echo "$out"; echo "FAIL: PyTorch load_file + load_state_dict(strict=True) of our --save ($model)"; exit 1; }
  echo "$out"
  torch_acc=$(value_after "torch test_acc" "$out")
  check_close "ours --save -> PyTorch load_state_dict ($model)" "$ours_acc" "$torch_acc"
done
echo "PASS"
