#!/bin/bash
# resnet18 weights move both ways between this engine and torchvision's resnet18(num_classes=10) (conv1 ->
# Conv2d(1, 64, 3, 1, 1, bias=False), maxpool -> Identity), through safetensors and torch.save files, with
# strict names:
#  1. ours -> torchvision: a resnet18 trained 3 SGD steps here and saved with SaveModuleWeights (.safetensors
#     and .pt) loads into torchvision with load_state_dict(strict=True) (load_file; torch.load with
#     weights_only=True), every num_batches_tracked is 3, and torchvision gives our eval-mode logits on a
#     fixed input.
#  2. torchvision -> ours: torchvision's state_dict (BatchNorm statistics and num_batches_tracked set to
#     non-initial values) saved with safetensors.torch.save_file and with torch.save loads into
#     MakeModel("resnet18") with strict names, and ours gives torchvision's eval-mode logits.
# Logits agree within 1e-4 * max(1, max |logit|) and in their predicted classes.
#
# The PyTorch side (nn/resnet_interchange.py) runs on the first Python that imports torch, torchvision and
# safetensors (with /opt/ddpengine-py, where tools/setup.sh installs safetensors, on PYTHONPATH) of:
# $TORCH_PYTHON, PyTorch 2.x in /opt/torch2 (FACTS.md), and /usr/bin/python3 (Debian's python3-torch and
# python3-torchvision, which tools/setup.sh installs). Prints "SKIPPED: ..." and passes when none does.
set -u
TOOL=nn/resnet_interchange_tool
PY=nn/resnet_interchange.py
export PYTHONPATH=/opt/ddpengine-py${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
STEPS=3
DIR=${TEST_TMPDIR:-$(mktemp -d)}

out=$(timeout 300 "$TOOL" save_ours "$DIR" "$STEPS" 2>&1) || { echo "$out"; echo "FAIL: our save"; exit 1; }
echo "$out"

# The PyTorch side exits 77 when it cannot import torch, torchvision or safetensors: try the next Python.
tried=()
for python in ${TORCH_PYTHON:-} /opt/torch2/bin/python /usr/bin/python3; do
  [ -x "$python" ] || continue
  out=$(timeout 300 "$python" "$PY" "$DIR" --expect_batches="$STEPS" 2>&1)
  rc=$?
  if [ $rc -eq 77 ]; then
    tried+=("$python ($out)")
    continue
  fi
  echo "PyTorch side: $python"
  echo "$out"
  [ $rc -eq 0 ] || { echo "FAIL: the PyTorch side ($python)"; exit 1; }
  out=$(timeout 300 "$TOOL" check_torch "$DIR" 2>&1) || { echo "$out"; echo "FAIL: torchvision -> ours"; exit 1; }
  echo "$out"
  echo "PASS"
  exit 0
done
echo "SKIPPED: no Python imports torch, torchvision and safetensors (tried: ${tried[*]:-none});" \
  "tools/setup.sh installs python3-torchvision and safetensors for /usr/bin/python3"
exit 0
