#!/bin/bash
# bench/perf_compare.py against a stand-in `perf` whose reports are known: per-symbol differences, JIT
# code of several threads as one row, kernel symbols prefixed, CPU ms per step, and bad input refused.
set -euo pipefail
script=$(find . -path '*bench/perf_compare.py' | head -1)
[[ -n $script ]] || { echo "perf_compare.py not in the runfiles" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The stand-in prints the `perf report -n --sort dso,sym -t SEP` rows of the recording named by -i.
cat >"$tmp/perf" <<'PERF'
#!/usr/bin/python3
import sys
path = sys.argv[sys.argv.index("-i") + 1]
sep = sys.argv[sys.argv.index("-t") + 1]
rows = {
    "a": [("40.00%", 4000, "[JIT] tid 11", "[.] 0x00007f01"), ("20.00%", 2000, "[JIT] tid 12", "[.] 0x00007f02"),
          ("10.00%", 1000, "train", "[.] ddp::Sgd::Step"), ("5.00%", 500, "train", "[.] ddp::ReduceInputs"),
          ("1.00%", 100, "[kernel.kallsyms]", "[k] finish_task_switch")],
    "b": [("50.00%", 5000, "[JIT] tid 21", "[.] 0x00007f03"), ("12.00%", 1200, "train", "[.] ddp::Sgd::Step"),
          ("3.00%", 300, "libc.so.6", "[.] __memset_avx2_unaligned_erms")],
}
if path not in rows:
    sys.exit(f"failed to open {path}: No such file or directory")
print("# header line")
for percent, samples, dso, symbol in rows[path]:
    print(sep.join([f" {percent} ", f" {samples} ", f"{dso}   ", symbol]))
PERF
chmod +x "$tmp/perf"
cd "$tmp"
out=$(PATH="$tmp:$PATH" python3 "$OLDPWD/$script" a b --frequency=1000 --per=10)
echo "$out"
expect() { grep -qE "$1" <<<"$out" || { echo "missing: $1" >&2; exit 1; }; }
expect '^samples: A 7600, B 6500, A-B \+1100$'
expect '^ +6000 +5000 +\+1000 +100\.000  \[JIT\]$'
expect '^ +500 +0 +\+500 +50\.000  ddp::ReduceInputs$'
expect '^ +100 +0 +\+100 +10\.000  \[kernel\] finish_task_switch$'
expect '^ +1000 +1200 +-200 +-20\.000  ddp::Sgd::Step$'
expect '^ +0 +300 +-300 +-30\.000  __memset_avx2_unaligned_erms$'
if PATH="$tmp:$PATH" python3 "$OLDPWD/$script" a missing 2>"$tmp/err"; then
  echo "a missing recording was accepted" >&2; exit 1
fi
grep -q "perf report -i missing failed" "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
if PATH="$tmp:$PATH" python3 "$OLDPWD/$script" a b --per=0 2>"$tmp/err"; then
  echo "--per=0 was accepted" >&2; exit 1
fi
echo "perf_compare_test: OK"
