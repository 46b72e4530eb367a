#!/bin/bash
# bench/sweep_stats.py: caps that differ by more than the rounds' noise are told apart (small p-value,
# "slower"), caps drawn from one distribution are not (large p-value), and a file that is not a sweep is
# refused naming the line.
set -euo pipefail
STATS="${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/sweep_stats.py"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"

python3 - "$TMP" <<'PY'
import json, random, sys
out = sys.argv[1]
rng = random.Random(7)
def write(name, centres):
    with open(f"{out}/{name}.jsonl", "w") as f:
        for config, centre in centres:
            rounds = [round(rng.gauss(centre, 0.03 * centre), 3) for _ in range(8)]
            f.write(json.dumps({"config": config, "step_ms_rounds": rounds}) + "\n")
write("apart", [("0", 1000), ("1", 1000), ("5", 1400), ("50", 1600), ("auto 1/25", 1000)])
write("tied", [("0", 1000), ("1", 1000), ("5", 1000), ("50", 1000), ("no_overlap", 1300)])
PY
printf '{"config": "0", "step_ms": 5}\n' > "$TMP/bad.jsonl"

apart=$(python3 "$STATS" "$TMP/apart.jsonl" --permutations=2000)
echo "$apart"
grep -q "the caps differ beyond the noise" <<<"$apart" || { echo "FAIL: separated caps not told apart"; exit 1; }
grep -E '^50 .* slower$' <<<"$apart" >/dev/null || { echo "FAIL: cap 50 (+60%) not resolved as slower"; exit 1; }

tied=$(python3 "$STATS" "$TMP/tied.jsonl" --permutations=2000)
echo "$tied"
grep -q "not distinguishable from noise" <<<"$tied" || { echo "FAIL: equal caps reported as different"; exit 1; }

if err=$(python3 "$STATS" "$TMP/bad.jsonl" 2>&1); then echo "FAIL: a row without rounds was accepted"; exit 1; fi
grep -q "bad.jsonl:1: not a sweep row with step_ms_rounds" <<<"$err" || { echo "FAIL: error was: $err"; exit 1; }
echo PASS
