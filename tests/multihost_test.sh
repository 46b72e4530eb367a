#!/bin/bash
# Two "hosts" on one machine: network namespaces ddpA<pid> and ddpB<pid>, joined by a veth pair with a
# private 10.x.y.z/30 chosen here. Node 0 (ddprun --node_rank 0, hosting the store) runs in A, node 1 in
# B; each runs one collective_worker, which must pass every collective check over the veth link and
# advertise its own veth address to Gloo. Only the two addresses created here are ever contacted.
#
# Needs root and iproute2; otherwise (or when the kernel refuses namespaces or veth) it prints
# "SKIPPED: ..." and exits 0. The namespaces are always removed (trap EXIT). Every step is bounded by
# `timeout`.
set -u

skip() {
  echo "SKIPPED: $*"
  exit 0
}

runfile() {
  if [[ -n "${TEST_SRCDIR:-}" && -n "${TEST_WORKSPACE:-}" ]]; then
    echo "${TEST_SRCDIR}/${TEST_WORKSPACE}/$1"
  else
    echo "$1"  # Run from the runfiles root (or the workspace's bazel-bin).
  fi
}

[[ "$EUID" == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is missing"

DDPRUN="$(runfile launch/ddprun)"
WORKER="$(runfile tests/collective_worker)"
[[ -x "$DDPRUN" && -x "$WORKER" ]] || { echo "FAIL: missing $DDPRUN or $WORKER"; exit 1; }

NS_A="ddpA$$"
NS_B="ddpB$$"
VETH_A="ddpa$$"
VETH_B="ddpb$$"
# A /30 in 10.0.0.0/8 picked from the PID, so concurrent runs of this test do not collide.
NET="10.$((200 + $$ % 50)).$(( ($$ / 50) % 256 ))"
ADDR_A="${NET}.1"
ADDR_B="${NET}.2"
PORT=29500
TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
WORK_DIR="${TEST_TMPDIR:-/tmp}/multihost_$$"
NODE1_PID=""

cleanup() {
  if [[ -n "$NODE1_PID" ]]; then kill -KILL "$NODE1_PID" 2>/dev/null; wait "$NODE1_PID" 2>/dev/null; fi
  # Anything still inside our namespaces (only processes this test started) goes first.
  for ns in "$NS_A" "$NS_B"; do
    for pid in $(timeout 5 ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    timeout 5 ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$WORK_DIR"
}
trap cleanup EXIT
trap 'exit 143' TERM  # Bazel's test timeout: exit through the EXIT trap (after the current step).
trap 'exit 130' INT

timeout 5 ip netns add "$NS_A" 2>/dev/null || skip "cannot create network namespace $NS_A"
timeout 5 ip netns add "$NS_B" 2>/dev/null || skip "cannot create network namespace $NS_B"
timeout 5 ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B" 2>/dev/null ||
  skip "cannot create a veth pair between the namespaces"

setup_ns() {  # namespace interface address
  timeout 5 ip -n "$1" link set lo up &&
    timeout 5 ip -n "$1" addr add "$3/30" dev "$2" &&
    timeout 5 ip -n "$1" link set "$2" up
}
setup_ns "$NS_A" "$VETH_A" "$ADDR_A" || { echo "FAIL: cannot configure $NS_A"; exit 1; }
setup_ns "$NS_B" "$VETH_B" "$ADDR_B" || { echo "FAIL: cannot configure $NS_B"; exit 1; }
if command -v ping >/dev/null 2>&1; then
  timeout 10 ip netns exec "$NS_B" ping -c 1 -W 5 "$ADDR_A" >/dev/null 2>&1 ||
    echo "note: ping $ADDR_A from $NS_B failed (continuing)"
fi

mkdir -p "$WORK_DIR"
run_node() {  # namespace node_rank
  DDP_TIMEOUT_S=30 timeout 90 ip netns exec "$1" "$DDPRUN" --nnodes 2 --node_rank "$2" \
    --nproc_per_node 1 --master_addr "$ADDR_A" --master_port "$PORT" --job_token "$TOKEN" \
    --grace_period_s 2 -- "$WORKER"
}
run_node "$NS_B" 1 >"$WORK_DIR/node1.out" 2>&1 &
NODE1_PID=$!
run_node "$NS_A" 0 >"$WORK_DIR/node0.out" 2>&1
CODE0=$?
wait "$NODE1_PID"
CODE1=$?
NODE1_PID=""

echo "---- node 0 (namespace $NS_A, $ADDR_A), exit $CODE0"
cat "$WORK_DIR/node0.out"
echo "---- node 1 (namespace $NS_B, $ADDR_B), exit $CODE1"
cat "$WORK_DIR/node1.out"

FAILED=0
[[ "$CODE0" == 0 ]] || { echo "FAIL: node 0 exited $CODE0"; FAILED=1; }
[[ "$CODE1" == 0 ]] || { echo "FAIL: node 1 exited $CODE1"; FAILED=1; }
expect_line() {  # file text
  grep -qF -- "$2" "$1" || { echo "FAIL: $1 lacks: $2"; FAILED=1; }
}
expect_line "$WORK_DIR/node0.out" "collective_worker rank 0/2 joined via env:// (gloo address $ADDR_A,"
expect_line "$WORK_DIR/node1.out" "collective_worker rank 1/2 joined via env:// (gloo address $ADDR_B,"
expect_line "$WORK_DIR/node0.out" "collective_worker rank 0/2: all "
expect_line "$WORK_DIR/node1.out" "collective_worker rank 1/2: all "
[[ "$FAILED" == 0 ]] && echo "PASSED: two nodes over a veth pair ($ADDR_A <-> $ADDR_B)"
exit "$FAILED"
