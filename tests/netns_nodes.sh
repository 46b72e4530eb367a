# Two "hosts" on this machine for multi-node launcher tests: two network namespaces joined by a veth pair,
# each with its own address, its own hostname (a UTS namespace) and a hosts file that resolves both names,
# so that a launcher's "is this endpoint mine?" and "what is my name?" answer as on two real machines
# (torchrun decides who hosts its c10d store by resolving its hostname). Sourced by
# tests/ddprun_netns_test.sh and tests/torchrun_parity_test.sh; needs root (CAP_SYS_ADMIN) and iproute2.
#
#   netns_nodes_up          creates both nodes; sets NETNS_ADDR[0], NETNS_ADDR[1] (their addresses) and
#                           NETNS_HOST[0], NETNS_HOST[1] (their hostnames). Returns 2 with the reason in
#                           NETNS_WHY when this machine cannot make namespaces (not root, no ip, no unshare,
#                           the kernel refuses); 1 (with NETNS_WHY) when setting them up failed.
#   netns_exec I CMD ARGS   runs CMD as host I (0 or 1): in its namespace, under its hostname and hosts file.
#   netns_nodes_down        kills whatever still runs in the namespaces (processes this script's caller
#                           started there), deletes them and the hosts file. Idempotent: call it from an
#                           EXIT trap.
NETNS_NAME=() NETNS_ADDR=() NETNS_HOST=() NETNS_WHY="" NETNS_DIR=""

netns_nodes_down() {
  local ns pid
  for ns in "${NETNS_NAME[@]}"; do
    for pid in $(timeout 5 ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    timeout 5 ip netns del "$ns" 2>/dev/null || true
  done
  NETNS_NAME=()
  [ -n "$NETNS_DIR" ] && rm -rf "$NETNS_DIR"
  NETNS_DIR=""
}

netns_nodes_up() {
  local i net out
  if [ "$(id -u)" != 0 ]; then NETNS_WHY="needs root (CAP_SYS_ADMIN) to create network namespaces"; return 2; fi
  command -v ip >/dev/null || { NETNS_WHY="the ip command (iproute2) is missing"; return 2; }
  command -v unshare >/dev/null || { NETNS_WHY="the unshare command (util-linux) is missing"; return 2; }
  NETNS_NAME=("ddpn0_$$" "ddpn1_$$")
  if ! out=$(ip netns add "${NETNS_NAME[0]}" 2>&1); then
    NETNS_NAME=()
    NETNS_WHY="the kernel refuses to create a network namespace here (no CAP_SYS_ADMIN?): $out"
    return 2
  fi
  # A /24 of 10.200.0.0/12 chosen by process id, so that concurrent tests do not share addresses.
  net="10.$((200 + $$ % 40)).$((($$ / 40) % 256))"
  NETNS_ADDR=("$net.1" "$net.2")
  NETNS_HOST=("ddpnode0-$$" "ddpnode1-$$")
  NETNS_DIR=$(mktemp -d)
  printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "${NETNS_ADDR[0]}" "${NETNS_HOST[0]}" \
    "${NETNS_ADDR[1]}" "${NETNS_HOST[1]}" >"$NETNS_DIR/hosts"
  # Both ends are called ddp0 inside their namespaces (GLOO_SOCKET_IFNAME=ddp0 names it on either node).
  if ! out=$({ ip netns add "${NETNS_NAME[1]}" &&
      ip link add "ddpa$$" netns "${NETNS_NAME[0]}" type veth peer name "ddpb$$" netns "${NETNS_NAME[1]}" &&
      ip -n "${NETNS_NAME[0]}" link set "ddpa$$" name ddp0 &&
      ip -n "${NETNS_NAME[1]}" link set "ddpb$$" name ddp0 &&
      for i in 0 1; do
        ip -n "${NETNS_NAME[$i]}" addr add "${NETNS_ADDR[$i]}/24" dev ddp0 &&
          ip -n "${NETNS_NAME[$i]}" link set ddp0 up && ip -n "${NETNS_NAME[$i]}" link set lo up || exit 1
      done; } 2>&1); then
    NETNS_WHY="setting up the namespaces failed: $out"
    netns_nodes_down
    return 1
  fi
}

netns_exec() {
  local i=$1
  shift
  # unshare: a hostname of its own (UTS) and a private mount namespace in which the hosts file is
  # bound over /etc/hosts; nothing outside the namespace changes.
  ip netns exec "${NETNS_NAME[$i]}" unshare --uts --mount --propagation private sh -c \
    'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' netns_exec \
    "$NETNS_DIR/hosts" "${NETNS_HOST[$i]}" "$@"
}
