# Two network namespaces joined by a veth pair whose both directions are limited by a token bucket (tc tbf),
# so that two ranks on this one host talk as if between machines. Sourced by bench/bucket_sweep.sh and
# bench/netns_allreduce.sh; needs root and iproute2.
#
#   netns_link_up RATE          creates the link (e.g. 1gbit, 100mbit; tbf burst 256 KiB, latency 50 ms) and
#                               sets NS_A, NS_B (the namespaces) and ADDR_A (rank 0's address); returns
#                               non-zero with a message when it cannot
#   netns_link_down             removes both namespaces and kills what still runs in them (also on failure)
#   netns_run_pair DDPRUN [PREFIX...] -- PROGRAM ARGS...
#                               runs PROGRAM as rank 0 in NS_A and rank 1 in NS_B under the ddprun binary
#                               DDPRUN, each started through PREFIX (e.g. chrt -f 5, taskset -c 0); prints
#                               rank 0's output; rank 1's goes to /dev/null; both are killed after
#                               NETNS_RUN_LIMIT_S seconds (default 1200), and the status is then 124
NS_A="" NS_B="" ADDR_A="" NETNS_RUN_LIMIT_S="${NETNS_RUN_LIMIT_S:-1200}"

netns_link_down() {
  local ns pid
  for ns in $NS_A $NS_B; do
    for pid in $(timeout 5 ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    timeout 5 ip netns del "$ns" 2>/dev/null || true
  done
  NS_A="" NS_B=""
}

netns_link_up() {
  local rate="$1" net addr_b side
  [[ $EUID == 0 ]] || { echo "netns link: needs root (network namespaces)" >&2; return 2; }
  command -v ip > /dev/null || { echo "netns link: needs iproute2 (the ip command)" >&2; return 2; }
  NS_A="netA$$" NS_B="netB$$"
  net="10.$((150 + $$ % 50)).$(( ($$ / 50) % 256 ))"
  ADDR_A="$net.1" addr_b="$net.2"
  ip netns add "$NS_A" && ip netns add "$NS_B" &&
    ip link add "va$$" netns "$NS_A" type veth peer name "vb$$" netns "$NS_B" || return 1
  for side in "$NS_A va$$ $ADDR_A" "$NS_B vb$$ $addr_b"; do
    set -- $side
    ip -n "$1" link set lo up && ip -n "$1" addr add "$3/30" dev "$2" && ip -n "$1" link set "$2" up &&
      ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms || return 1
  done
}

netns_run_pair() {
  local ddprun="$1" prefix=() token port=29400
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do prefix+=("$1"); shift; done
  shift  # the --
  token="$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  DDP_TIMEOUT_S=120 timeout "$NETNS_RUN_LIMIT_S" ip netns exec "$NS_B" "${prefix[@]}" "$ddprun" --nnodes 2 --node_rank 1 \
    --nproc_per_node 1 --master_addr "$ADDR_A" --master_port $port --job_token "$token" "$@" > /dev/null 2>&1 &
  DDP_TIMEOUT_S=120 timeout "$NETNS_RUN_LIMIT_S" ip netns exec "$NS_A" "${prefix[@]}" "$ddprun" --nnodes 2 --node_rank 0 \
    --nproc_per_node 1 --master_addr "$ADDR_A" --master_port $port --job_token "$token" "$@" 2>&1
  local status=$?
  wait
  return $status
}
