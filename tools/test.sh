#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything optimised, runs every test, checks
# that the floors hold (tools/check_floors.py), and ends with a plain "N passed, N failed, N skipped"
# line (counted per Bazel test target and configuration; a target that ran nothing because it cannot run
# here, e.g. a GPU test without a GPU, counts as skipped and is listed above the line with its reason).
# Exit status: 0 only when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

log=$(mktemp)
skips=$(mktemp)

# Prints "<target>: <reason>" for each target of the bazel log $1 that passed without running any test
# case: its test.log says "SKIPPED: <reason>" and gtest ran 0 tests (or it is not a gtest program).
list_skipped() {
  grep -oE '^//[^ ]+ +(\(cached\) )?PASSED' "$1" | awk '{print $1}' | while read -r target; do
    local testlog="bazel-testlogs/${target#//}"
    testlog="${testlog/://}/test.log"
    local reason
    reason=$(grep -m1 -oE '^SKIPPED: .*' "$testlog" 2>/dev/null) || continue
    if grep -q '^\[  PASSED  \] 0 tests' "$testlog" || ! grep -q '^\[==========\]' "$testlog"; then
      echo "${target}${2:-}: ${reason#SKIPPED: }"
    fi
  done
}

bazel test //... 2>&1 | tee "$log" | grep -vE '^[0-9.]+: src/main/tools/linux-sandbox'
status=${PIPESTATUS[0]}
list_skipped "$log" >> "$skips"

# GPU code never rots: where nvcc exists, the CUDA configuration is compiled and linked too, and its
# tests run (they print "SKIPPED: no CUDA device" and skip on machines without a GPU).
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== --config=cuda: build everything, run the CUDA tests"
  bazel build --config=cuda //... 2>&1 | tail -3
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cuda_log=$(mktemp)
  # The same CUDA tests the GPU check bundles (tools/gpu_check.sh holds the one list).
  mapfile -t cuda_tests < <(bash tools/gpu_check.sh test_labels)
  bazel test --config=cuda "${cuda_tests[@]}" \
    2>&1 | sed -E 's/^(\/\/[^ ]+)( +)/\1 (cuda)\2/' | tee "$cuda_log" |
    grep -E 'PASSED|FAILED|SKIPPED|ERROR'
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  sed -E 's/^(\/\/[^ ]+) \(cuda\)/\1/' "$cuda_log" | list_skipped /dev/stdin " (cuda)" >> "$skips"
  cat "$cuda_log" >> "$log"
  rm -f "$cuda_log"
else
  echo "== no nvcc at /usr/local/cuda/bin: the CUDA configuration is not built"
fi

# bf16 on a CPU without AVX-512, whatever CPU runs the suite: the bf16 tests again with oneDNN limited to
# AVX2 (no bf16 matmul or primitives, no Winograd), where the engine falls back to its float32 kernels and
# refuses DDP_BF16_GEMM=onednn by name.
echo "== bf16 with oneDNN limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2)"
avx2_log=$(mktemp)
bazel test --test_env=ONEDNN_MAX_CPU_ISA=AVX2 //tensor:autocast_test //tensor:channels_last_test \
  //tensor:conv_kernel_choice_test //nn:autocast_fixture_test //tests:bf16_train_test \
  2>&1 | sed -E 's/^(\/\/[^ ]+)( +)/\1 (avx2)\2/' | tee "$avx2_log" | grep -E 'PASSED|FAILED|SKIPPED|ERROR'
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cat "$avx2_log" >> "$log"
rm -f "$avx2_log"

# The floors: upward dependencies must be refused by Bazel and absent from #includes.
echo "== floors"
python3 tools/check_floors.py
floors=$?
[ "$floors" -eq 0 ] || status=1

# A project outside the tree (its own WORKSPACE) builds against the engine and runs 2-rank DDP.
echo "== examples/external_workspace"
bash examples/external_workspace/build_and_run.sh
external=$?
[ "$external" -eq 0 ] || status=1

passed=$(grep -cE '^//[^ ]+ +(\((cuda|avx2)\) +)?(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\((cuda|avx2)\) +)?(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
flaky=$(grep -cE '^//[^ ]+ +(\((cuda|avx2)\) +)?(\(cached\) )?FLAKY' "$log")
skipped=$(wc -l < "$skips")
passed=$((passed - skipped))
failed=$((failed + flaky + (floors != 0) + (external != 0)))
passed=$((passed + (external == 0)))
rm -f "$log"
bazel shutdown >/dev/null 2>&1 || true
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # a build error counts as a failure
if [ "$skipped" -gt 0 ]; then
  echo "skipped (cannot run on this machine):"
  sed 's/^/  /' "$skips"
fi
rm -f "$skips"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$status"
