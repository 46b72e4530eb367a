#!/bin/bash
# ddprun as a drop-in torchrun: a plain PyTorch DDP script (tests/torch_ddp_worker.py, gloo, env://)
# trains on 3 ranks and checks its all-reduced values; the same command form runs train/train.
# Prints "SKIPPED: ..." and passes when /usr/bin/python3 cannot import torch.
set -u
DDPRUN=launch/ddprun
if ! /usr/bin/python3 -c "import torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 cannot import torch with gloo"
  exit 0
fi
out=$(timeout 240 "$DDPRUN" --nproc_per_node=3 --master_port=0 /usr/bin/python3 tests/torch_ddp_worker.py 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: ddprun + PyTorch exited $rc"; exit 1; }
for rank in 0 1 2; do
  echo "$out" | grep -q "^\[rank $rank\] rank $rank ok$" || { echo "FAIL: rank $rank did not finish"; exit 1; }
done
echo "$out" | grep -q "Address already in use" && { echo "FAIL: a store took MASTER_PORT"; exit 1; }

out=$(timeout 240 "$DDPRUN" --nproc_per_node=3 --master_port=0 train/train --model=mlp --epochs=1 \
      --max_steps=3 2>&1)
rc=$?
echo "$out" | tail -20
[ "$rc" -eq 0 ] || { echo "FAIL: ddprun + train/train exited $rc"; exit 1; }
echo "PASS"
