#!/bin/bash
# PyTorch interop as users do it, both directions, for mlp and cnn_bn (BatchNorm buffers included), in
# both weight formats:
#  1. PyTorch trains a few steps and saves model.state_dict() (torch.save to .pt, or
#     safetensors.torch.save_file); train/train --eval_only --init_from loads it and its test accuracy
#     equals PyTorch's (within 0.002).
#  2. train/train trains a few steps with --save (.pt or .safetensors); PyTorch loads it
#     (torch.load(weights_only=True) or load_file) with load_state_dict(strict=True) (num_batches_tracked
#     and trained running statistics checked) and its accuracy equals ours.
# The PyTorch side is tests/weights_interop.py: torch.save files with PyPI's PyTorch 2.x in /opt/torch2
# where it is installed, else /usr/bin/python3's 1.13; safetensors with /usr/bin/python3 and safetensors
# from /opt/ddpengine-py (tools/setup.sh). A format whose Python cannot import what it needs prints
# "SKIPPED: ..." and is left out.
set -u
TRAIN=train/train
PY=tests/weights_interop.py
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
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

# The Python that handles FORMAT, or nothing when none can.
python_for() {
  if [ "$1" = pt ]; then
    for p in /opt/torch2/bin/python /usr/bin/python3; do
      if "$p" -c "import torch" 2>/dev/null; then echo "$p"; return; fi
    done
  elif PYTHONPATH=/opt/ddpengine-py /usr/bin/python3 -c "import torch, safetensors.torch" 2>/dev/null; then
    echo /usr/bin/python3
  fi
}

ran=0
for format in pt safetensors; do
  python=$(python_for $format)
  if [ -z "$python" ]; then echo "SKIPPED: $format: no Python with torch (and safetensors) here"; continue; fi
  ran=$((ran + 1))
  torch_py() { PYTHONPATH=/opt/ddpengine-py${PYTHONPATH:+:$PYTHONPATH} "$python" "$PY" "$@"; }
  for model in mlp cnn_bn; do
    # 1. PyTorch -> ours.
    out=$(torch_py save "$model" "$TMP/torch_$model.$format" --steps=$STEPS 2>&1) ||
      { echo "$out"; echo "FAIL: PyTorch save ($model, $format)"; exit 1; }
    out=$(torch_py eval "$model" "$TMP/torch_$model.$format" 2>&1) ||
      { echo "$out"; echo "FAIL: PyTorch eval of its own file ($model, $format)"; exit 1; }
    torch_acc=$(value_after "torch test_acc" "$out")
    out=$(timeout 300 "$TRAIN" --model="$model" --eval_only --init_from="$TMP/torch_$model.$format" 2>&1) ||
      { echo "$out"; echo "FAIL: train/train --init_from a PyTorch file ($model, $format)"; exit 1; }
    ours_acc=$(value_after "final test_acc" "$out")
    check_close "PyTorch ($python) $format -> ours --init_from ($model)" "$ours_acc" "$torch_acc"

    # 2. Ours -> PyTorch.
    out=$(timeout 300 "$TRAIN" --model="$model" --epochs=1 --max_steps=$STEPS --seed=1 \
          --save="$TMP/ours_$model.$format" 2>&1) ||
      { echo "$out"; echo "FAIL: train/train --save ($model, $format)"; exit 1; }
    ours_acc=$(value_after "final test_acc" "$out")
    expect=()
    [ "$model" = cnn_bn ] && expect=(--expect_batches=$STEPS)
    out=$(torch_py eval "$model" "$TMP/ours_$model.$format" "${expect[@]}" 2>&1) ||
      { echo "$out"; echo "FAIL: PyTorch load + load_state_dict(strict=True) of our --save ($model, $format)"; exit 1; }
    echo "$out"
    torch_acc=$(value_after "torch test_acc" "$out")
    check_close "ours --save $format -> PyTorch ($python) load_state_dict ($model)" "$ours_acc" "$torch_acc"
  done
done
[ "$ran" -gt 0 ] || echo "SKIPPED: no format could be checked"
echo "PASS"
