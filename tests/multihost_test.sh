#!/bin/bash
# Two "hosts" on one machine: network namespaces ddpA<pid> and ddpB<pid>, joined by a veth pair with a
# private 10.x.y.z/30 chosen here. Node 0 (ddprun --node_rank 0, hosting the store) runs in A, node 1 in
# B. Two jobs run:
#   1. one collective_worker per node over Gloo: every collective check over the veth link, each rank
#      advertising its own veth address to Gloo;
#   2. two collective_workers per node with --backend=auto, each node in its own UTS namespace with its
#      own hostname (so the ranks see two hosts): auto must choose the hierarchical group (shared memory
#      inside a node, Gloo across; Note [Hierarchical all-reduce]) and pass every collective check.
# Only the two addresses created here are ever contacted.
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
FAILED=0
expect_line() {  # file text
  grep -qF -- "$2" "$1" || { echo "FAIL: $1 lacks: $2"; FAILED=1; }
}
# Runs one job: node 1 in B (background), node 0 in A; prints both outputs; fails on a non-zero exit.
# Arguments: job name, ranks per node, hostname prefix ("" keeps the machine's hostname), worker flags.
run_job() {
  local job="$1" nproc="$2" hostprefix="$3"
  shift 3
  run_node() {  # namespace node_rank worker-flags...
    local ns="$1" node="$2"
    shift 2
    local -a cmd=("$DDPRUN" --nnodes 2 --node_rank "$node" --nproc_per_node "$nproc" --master_addr "$ADDR_A"
                  --master_port "$PORT" --job_token "$TOKEN" --grace_period_s 2 -- "$WORKER" "$@")
    if [[ -n "$hostprefix" ]]; then  # its own hostname: a separate host identity (comm/host_identity.h)
      DDP_TIMEOUT_S=30 timeout 90 ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' \
        "${hostprefix}${node}" "${cmd[@]}"
    else
      DDP_TIMEOUT_S=30 timeout 90 ip netns exec "$ns" "${cmd[@]}"
    fi
  }
  run_node "$NS_B" 1 "$@" >"$WORK_DIR/$job.node1.out" 2>&1 &
  NODE1_PID=$!
  run_node "$NS_A" 0 "$@" >"$WORK_DIR/$job.node0.out" 2>&1
  local code0=$?
  wait "$NODE1_PID"
  local code1=$?
  NODE1_PID=""
  echo "---- $job: node 0 (namespace $NS_A, $ADDR_A), exit $code0"
  cat "$WORK_DIR/$job.node0.out"
  echo "---- $job: node 1 (namespace $NS_B, $ADDR_B), exit $code1"
  cat "$WORK_DIR/$job.node1.out"
  [[ "$code0" == 0 ]] || { echo "FAIL: $job: node 0 exited $code0"; FAILED=1; }
  [[ "$code1" == 0 ]] || { echo "FAIL: $job: node 1 exited $code1"; FAILED=1; }
}

run_job gloo 1 ""
expect_line "$WORK_DIR/gloo.node0.out" "collective_worker rank 0/2 joined via env:// (gloo address $ADDR_A,"
expect_line "$WORK_DIR/gloo.node1.out" "collective_worker rank 1/2 joined via env:// (gloo address $ADDR_B,"
expect_line "$WORK_DIR/gloo.node0.out" "collective_worker rank 0/2: all "
expect_line "$WORK_DIR/gloo.node1.out" "collective_worker rank 1/2: all "

if ! command -v unshare >/dev/null 2>&1; then
  echo "note: unshare (util-linux) is missing: the hierarchical job is not run"
else
  PORT=29501
  run_job hier 2 "ddphost$$-" --backend=auto
  for rank in 0 1; do
    expect_line "$WORK_DIR/hier.node0.out" "collective_worker rank $rank/4: all "
    expect_line "$WORK_DIR/hier.node1.out" "collective_worker rank $((rank + 2))/4: all "
  done
  expect_line "$WORK_DIR/hier.node0.out" "backend hier(shm+gloo))"
  expect_line "$WORK_DIR/hier.node1.out" "backend hier(shm+gloo))"
fi
[[ "$FAILED" == 0 ]] && echo "PASSED: two nodes over a veth pair ($ADDR_A <-> $ADDR_B): gloo, and shm+gloo hierarchical"
exit "$FAILED"
