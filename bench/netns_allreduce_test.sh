#!/bin/bash
# bench/netns_allreduce.sh end to end (and with it bench/netns_link.sh, which bench/bucket_sweep.sh --netns
# shares): two ranks in two network namespaces over a 100 Mbit/s tbf link print one row per size, no
# namespace is left behind, and a bad argument is refused by name. Needs root and iproute2; otherwise it
# prints "SKIPPED: ..." and exits 0.
set -u

skip() {
  echo "SKIPPED: $*"
  exit 0
}
fail() {
  echo "FAIL: $*"
  exit 1
}

[[ "$EUID" == 0 ]] || skip "needs root to create network namespaces"
command -v ip > /dev/null 2>&1 || skip "the ip command (iproute2) is missing"
SCRIPT="${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/netns_allreduce.sh"
[[ -x "$SCRIPT" ]] || fail "missing $SCRIPT"
if ! ip netns add "probe$$" 2> /dev/null; then skip "the kernel refuses network namespaces here"; fi
ip netns del "probe$$"

before="$(ip netns list | sort)"
out="$(timeout 120 "$SCRIPT" --rate=100mbit -- --bytes=4,1048576 --warmup=1 --min_iters=3 --target_ms=20 2>&1)"
status=$?
after="$(ip netns list | sort)"
echo "$out"
[[ $status == 0 ]] || fail "netns_allreduce.sh exited with $status"
[[ "$before" == "$after" ]] || fail "namespaces left behind: $(comm -13 <(echo "$before") <(echo "$after"))"
grep -q "^# link 100mbit between two network namespaces" <<< "$out" || fail "no header line"
for bytes in 4 1048576; do
  grep -Eq "^ +$bytes +[0-9.]+ +[0-9]+$" <<< "$out" || fail "no row for $bytes bytes"
done
# 1 MiB of a ring of 2 is 512 KiB each way: at 100 Mbit/s (12.5 MB/s) 42 ms a call. The tbf bucket's 256
# KiB burst, full after idle, can carry at most half of one call at line speed (a smaller size fits in it
# whole, warmup and timed calls alike, and then measures loopback), so the median of the timed calls stays
# above 20 ms exactly when the link is in the path (loopback: ~1 ms).
us="$(awk '$1 == 1048576 {print $2}' <<< "$out")"
awk -v us="$us" 'BEGIN {exit !(us > 20000)}' || fail "1 MiB took $us us: is the rate limit in the path?"

bad="$(timeout 20 "$SCRIPT" --rates=1gbit 2>&1)"
[[ $? == 2 && "$bad" == *"unknown argument --rates=1gbit"* ]] || fail "a bad argument was not refused: $bad"
echo "PASS"
