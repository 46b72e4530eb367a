#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything optimised, runs every test, and
# ends with a plain "N passed, N failed" line (counted per Bazel test target). Exit status: 0 only when
# every test passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

log=$(mktemp)
bazel test //... 2>&1 | tee "$log" | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox'
status=${PIPESTATUS[0]}

# GPU code never rots: where nvcc exists, the CUDA configuration is compiled and linked too, and its
# tests run (they print "SKIPPED: no CUDA device" and pass on machines without a GPU).
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== --config=cuda: build everything, run the CUDA tests"
  bazel build --config=cuda //... 2>&1 | tail -3
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  bazel test --config=cuda //tensor/cuda:cuda_ops_test //comm:process_group_nccl_test //nn:optimizer_cuda_test //tests:nccl_ddp_test 2>&1 | tee -a "$log" |
    grep -E 'PASSED|FAILED|SKIPPED|ERROR'
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  echo "== no nvcc at /usr/local/cuda/bin: the CUDA configuration is not built"
fi

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
flaky=$(grep -cE '^//[^ ]+ +(\(cached\) )?FLAKY' "$log")
failed=$((failed + flaky))
rm -f "$log"
bazel shutdown >/dev/null 2>&1 || true
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # a build error counts as a failure
echo "${passed} passed, ${failed} failed"
exit "$status"
