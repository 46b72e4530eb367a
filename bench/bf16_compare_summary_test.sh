#!/bin/bash
# bench/bf16_compare_summary.py: medians, ranges and per-round ratios of a bf16_compare.sh output with a
# VARIANT run, our channels-last runs and PyTorch's channels_last runs, against values worked out by hand; a
# round without its PyTorch bf16 run is left out; fp16 runs (PRECISIONS) get their own lines.
set -euo pipefail
SUMMARY="${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/bf16_compare_summary.py"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
run() {  # impl precision ms [cl: channels-last, as each side's JSON says it]
  local field=step_ms_p50 layout=""
  [ "$1" = pytorch ] && field=step_ms
  if [ "${4:-}" = cl ]; then
    layout=', "memory_format": "channels_last"'
    [ "$1" = pytorch ] && layout=', "channels_last": true'
  fi
  printf '{"impl": "%s", "model": "resnet18", "precision": "%s", "%s": %s%s}\n' "$1" "$2" "$field" "$3" "$layout"
}
{
  echo "# header line"
  for round in "900 500 480 1400 700 880 400" "1000 520 470 1500 650 950 420" "950 510 490 1450 720 960 380" \
    "990 505 485 0 0 900 400"; do
    read -r fp32 bf16 variant tfp32 tbf16 fp32_cl bf16_cl <<<"$round"
    run ddpengine fp32 "$fp32"; run ddpengine bf16 "$bf16"
    run ddpengine fp32 "$fp32_cl" cl; run ddpengine bf16 "$bf16_cl" cl
    echo "# variant: DDP_X=1"; run ddpengine bf16 "$variant"
    if [ "$tfp32" != 0 ]; then
      run pytorch fp32 "$tfp32"; run pytorch bf16 "$tbf16"
      run pytorch fp32 $((tfp32 - 100)) cl; run pytorch bf16 $((tbf16 - 100)) cl
    fi
  done
} > "$TMP/compare.txt"
out=$(python3 "$SUMMARY" "$TMP/compare.txt")
echo "$out"
expect() { grep -qF -- "$1" <<<"$out" || { echo "FAIL: missing '$1'"; exit 1; }; }
ratio() { printf '  %-30s %s' "$1" "$2"; }  # a ratio line as the script prints it
expect "resnet18: 3 complete rounds"
expect "ours_bf16          510.0 (500.0-520.0) ms"
expect "ours_bf16_variant  480.0 (470.0-490.0) ms"
expect "torch_bf16         700.0 (650.0-720.0) ms"
# per round: 900/500 = 1.80, 1000/520 = 1.92, 950/510 = 1.86; 700/500 = 1.40, 650/520 = 1.25, 720/510 = 1.41
expect "$(ratio "ours bf16 / ours fp32" "1.86x (1.80-1.92)")"
expect "$(ratio "ours bf16 vs torch bf16" "1.40x (1.25-1.41)")"
# 700/480 = 1.46, 650/470 = 1.38, 720/490 = 1.47
expect "$(ratio "variant vs torch bf16" "1.46x (1.38-1.47)")"
# channels_last runs are 100 ms faster: 600/500 = 1.20, 550/520 = 1.06, 620/510 = 1.22
expect "torch_bf16_cl      600.0 (550.0-620.0) ms"
expect "$(ratio "ours bf16 vs torch bf16 cl" "1.20x (1.06-1.22)")"
# ours in channels-last: 900/400 = 2.25, 1000/420 = 2.38, 950/380 = 2.50; against our channels-last fp32
# 880/400 = 2.20, 950/420 = 2.26, 960/380 = 2.53
expect "ours_bf16_cl       400.0 (380.0-420.0) ms"
expect "$(ratio "ours bf16 cl / ours fp32" "2.38x (2.25-2.50)")"
expect "$(ratio "ours bf16 cl / ours fp32 cl" "2.26x (2.20-2.53)")"
# each side's faster layout: ours fp32 880, 950, 950 over bf16 400, 420, 380 = 2.20, 2.26, 2.50; PyTorch's
# bf16 600, 550, 620 over ours 400, 420, 380 = 1.50, 1.31, 1.63
expect "$(ratio "best: ours bf16 / ours fp32" "2.26x (2.20-2.50)")"
expect "$(ratio "best: ours bf16 vs torch bf16" "1.50x (1.31-1.63)")"
expect "$(ratio "ours bf16 cl vs torch bf16 cl" "1.50x (1.31-1.63)")"
# With PRECISIONS="fp32 bf16 fp16": the fp16 runs' medians and ratios (an mlp, no channels_last runs).
{
  for round in "10 6 12 20 15 25" "11 6 13 22 16 26"; do
    read -r fp32 bf16 fp16 tfp32 tbf16 tfp16 <<<"$round"
    for kind in "ddpengine fp32 $fp32" "ddpengine bf16 $bf16" "ddpengine fp16 $fp16" "pytorch fp32 $tfp32" \
      "pytorch bf16 $tbf16" "pytorch fp16 $tfp16"; do
      # shellcheck disable=SC2086 # three words
      run $kind | sed 's/resnet18/mlp/'
    done
  done
} > "$TMP/compare_fp16.txt"
out=$(python3 "$SUMMARY" "$TMP/compare_fp16.txt")
echo "$out"
expect "mlp: 2 complete rounds"
expect "ours_fp16          12.5 (12.0-13.0) ms"
# 10/12 = 0.83, 11/13 = 0.85; 25/12 = 2.08, 26/13 = 2.00
expect "$(ratio "ours fp16 / ours fp32" "0.84x (0.83-0.85)")"
expect "$(ratio "ours fp16 vs torch fp16" "2.04x (2.00-2.08)")"
echo PASS
