#!/usr/bin/env bash
# ddp_sim as a user runs it: bad numbers exit 1 with one line naming the flag and its value (never an
# abort), --alpha_us without --gbps is named, and "--gbps=0" is not mistaken for "no --gbps".
set -uo pipefail
SIM="$TEST_SRCDIR/$TEST_WORKSPACE/sim/ddp_sim"
fails=0
expect() {  # expect EXIT_CODE MESSAGE ARGS...
  local code=$1 message=$2
  shift 2
  local out
  out=$("$SIM" predict --synthetic=mlp:100,10 "$@" 2>&1)
  local got=$?
  if [[ $got -ne $code || "$out" != *"$message"* ]]; then
    echo "FAIL: ddp_sim predict $*: exit $got (want $code), output: $out (want: $message)"
    fails=$((fails + 1))
  fi
}
expect 1 "ddp_sim: --world_size=0: must be from 1 to 16777216 (ranks)" --world_size=0 --preset=10gbe
expect 1 "ddp_sim: --gbps=0: must be a finite number > 0 (GB/s of one link)" --gbps=0 --alpha_us=10
expect 1 "ddp_sim: --alpha_us=-5: must be a finite number >= 0" --alpha_us=-5 --gbps=1
expect 1 "ddp_sim: --alpha_us needs --gbps too" --alpha_us=5
expect 1 "ddp_sim: --tflops=nan: must be a finite number > 0" --tflops=nan --preset=10gbe
expect 1 "ddp_sim: --batch=-4: must be >= 1" --batch=-4 --preset=10gbe
expect 1 "ddp_sim: name the link" 
expect 0 "caps MiB" --alpha_us=0 --gbps=1
[[ $fails -eq 0 ]] && echo "PASS" || exit 1
