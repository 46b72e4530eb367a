#!/bin/bash
# ddprun's two-node path between two "hosts": network namespaces joined by a veth pair, each with its own
# address and hostname (tests/netns_nodes.sh). No PyTorch needed (tests/torchrun_parity_test.sh runs the
# same layout under PyTorch's torchrun when it is installed).
#   1. The same c10d command line on both nodes (--rdzv_endpoint=<node 0's address>): the node that owns
#      the address hosts the store and is node 0, the other gets node rank 1 there; every worker gets
#      torchrun's variables (GROUP_RANK, RANK, WORLD_SIZE, MASTER_ADDR = node 0's address) and all four
#      meet in the store across the link (launch/store_rendezvous_check).
#   2. train/train --backend=gloo on one worker per node trains exactly as one node with two workers on
#      loopback (the same losses and accuracy): DDP's collectives cross the veth link.
#   3. A node whose --rdzv_id differs is refused by name across the link.
#   No namespace or process is left behind. Prints "SKIPPED: ..." and passes where namespaces cannot be
#   made (not root, no iproute2, a kernel that refuses).
set -u
DDPRUN=$PWD/launch/ddprun
CHECK=$PWD/launch/store_rendezvous_check
TRAIN=$PWD/train/train
source "$PWD/tests/netns_nodes.sh"
work=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  netns_nodes_down
  if [ "${failures:-0}" -ne 0 ] && [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
    cp "$work"/*.out "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

before=$(ip netns list 2>/dev/null | sort)
netns_nodes_up
case $? in
  0) ;;
  2) echo "SKIPPED: $NETNS_WHY"; exit 0 ;;
  *) echo "FAIL: $NETNS_WHY"; exit 1 ;;
esac
A0=${NETNS_ADDR[0]}
echo "== nodes: ${NETNS_HOST[0]} at $A0, ${NETNS_HOST[1]} at ${NETNS_ADDR[1]}"
export DDP_JOB_TOKEN=netns-secret DDP_TIMEOUT_S=120

# both_nodes NAME ARGS...: `ddprun ARGS` as host 0 and as host 1 at once (host 1 first, so that it waits
# for node 0's store as a remote node would); outputs in $work/NAME.{0,1}.out, exit codes in NAME.{0,1}.rc.
both_nodes() {
  local name=$1 node
  shift
  pids=()
  for node in 1 0; do
    (netns_exec "$node" timeout 300 "$DDPRUN" "$@" >"$work/$name.$node.out" 2>&1
     echo $? >"$work/$name.$node.rc") &
    pids+=($!)
  done
  wait "${pids[@]}"
  pids=()
}
rc_of() { cat "$work/$1.rc" 2>/dev/null || echo missing; }

# 1. Variables and the store across the link.
both_nodes store --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$A0:29400" \
  --rdzv_id=netns -- /bin/sh -c "echo G=\$GROUP_RANK R=\$RANK W=\$WORLD_SIZE M=\$MASTER_ADDR H=\$(hostname); exec $CHECK"
for node in 0 1; do
  [ "$(rc_of store.$node)" = 0 ] || fail "store: node $node exited $(rc_of store.$node): $(tail -5 "$work/store.$node.out")"
  for local in 0 1; do
    rank=$((node * 2 + local))
    grep -q "^\[rank $rank\] G=$node R=$rank W=4 M=$A0 H=${NETNS_HOST[$node]}$" "$work/store.$node.out" ||
      fail "store: host $node has no rank $rank with GROUP_RANK=$node, WORLD_SIZE=4, MASTER_ADDR=$A0"
    grep -q "^\[rank $rank\] rendezvous ok" "$work/store.$node.out" || fail "store: rank $rank did not meet the others"
  done
done
echo "== store: 4 ranks on 2 hosts met at $A0:29400"

# 2. DDP over gloo across the link = one node with two workers on loopback.
ARGS=(--model=mlp --epochs=1 --max_steps=20 --seed=3 --num_workers=0 --backend=gloo)
(cd "$work" && timeout 300 "$DDPRUN" --nproc_per_node=2 "$TRAIN" "${ARGS[@]}" --metrics_out="$work/loopback.jsonl" \
  >"$work/loopback.out" 2>&1) || fail "train on loopback exited $?: $(tail -5 "$work/loopback.out")"
both_nodes train --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$A0:29401" --rdzv_id=netns \
  "$TRAIN" "${ARGS[@]}" --metrics_out="$work/netns.jsonl"
for node in 0 1; do
  [ "$(rc_of train.$node)" = 0 ] || fail "train: node $node exited $(rc_of train.$node): $(tail -5 "$work/train.$node.out")"
done
grep -q "DDP: 2 ranks over gloo" "$work/train.0.out" || fail "train: not 2 ranks over gloo: $(tail -3 "$work/train.0.out")"
python3 - "$work/loopback.jsonl" "$work/netns.jsonl" <<'PY' || fail "train: the two-host run differs from loopback"
import json, sys
loop, netns = (json.loads(open(path).read().splitlines()[-1]) for path in sys.argv[1:])
for key in ("train_loss", "test_loss", "test_acc"):
    print(f"== train {key}: loopback {loop[key]:.6f}, two hosts {netns[key]:.6f}")
    if abs(loop[key] - netns[key]) > 1e-6:
        sys.exit(f"{key} differs")
if netns["world_size"] != 2 or netns["steps"] != 20:
    sys.exit(f"the two-host run was {netns['steps']} steps at world size {netns['world_size']}")
PY

# 3. A node of another job at the same endpoint is refused across the link, naming both ids.
pids=()
for node in 0 1; do
  (netns_exec "$node" timeout 120 "$DDPRUN" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
     --rdzv_endpoint="$A0:29402" --rdzv_id="job-$node" --rdzv_conf=join_timeout=15 -- /bin/true \
     >"$work/ids.$node.out" 2>&1; echo $? >"$work/ids.$node.rc") &
  pids+=($!)
done
wait "${pids[@]}"
pids=()
[ "$(rc_of ids.1)" != 0 ] || fail "ids: host 1 with --rdzv_id=job-1 was not refused"
grep -q "is for --rdzv_id=job-0, not --rdzv_id=job-1" "$work/ids.1.out" ||
  fail "ids: the refusal does not name both ids: $(cat "$work/ids.1.out")"
[ "$(rc_of ids.0)" != 0 ] || fail "ids: host 0 ran without its second node"
echo "== ids: host 1 refused: $(grep -m1 -o 'the rendezvous at this endpoint.*' "$work/ids.1.out")"

netns_nodes_down
after=$(ip netns list 2>/dev/null | sort)
[ "$before" = "$after" ] || fail "namespaces left behind: $(comm -13 <(echo "$before") <(echo "$after"))"
if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "PASS"
