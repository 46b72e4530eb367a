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

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log")
flaky=$(grep -cE '^//[^ ]+ +(\(cached\) )?FLAKY' "$log")
failed=$((failed + flaky))
rm -f "$log"
bazel shutdown >/dev/null 2>&1 || true
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # a build error counts as a failure
echo "${passed} passed, ${failed} failed"
exit "$status"
