#!/usr/bin/env bash
# Builds examples/external_workspace/project, a Bazel workspace of its own that depends on this engine
# as a local repository, and runs its 2-rank DDP program (two_rank_ddp.cc: public headers only, one
# dependency, @ddpengine//examples/external_workspace:ddpengine). tools/test.sh calls it. Offline, as the
# engine's own build. Exit status 0 only when it builds and both ranks train to the same weights.
set -uo pipefail
cd "$(dirname "$0")/project"
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
log=$(mktemp)
bazel build //:two_rank_ddp >"$log" 2>&1
rc=$?
grep -vE '^[0-9.]+: src/main/tools/linux-sandbox' "$log" | tail -4
rm -f "$log"
[ "$rc" -eq 0 ] || { echo "external_workspace: the outside project does not build against the engine"; exit 1; }
out=$(timeout 300 bazel-bin/two_rank_ddp 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ] || ! echo "$out" | grep -q "^two_rank_ddp: ok$"; then
  echo "external_workspace: two_rank_ddp exited $rc"
  exit 1
fi
echo "external_workspace: PASS"
