#!/bin/bash
# bench/allreduce with every impl (ours, raw, shm, shm_buf, floor) at world 2 and small sizes (4 B .. 1 KiB):
# exactly one JSON row per impl and size with a positive time and the ratio fields (ours_over_raw,
# over_ours) consistent with the rows' times; each impl's all-reduce result is checked by the benchmark
# itself before timing (exit code 4 on a wrong sum, which fails this test), and a deliberately wrong input
# (--corrupt_check_at_rank) must trip that check for every impl. Also: the default --impls times ours and
# raw only (the rows BENCHMARKS.md's tables came from), and an unknown impl is refused with a message naming
# it. Last, bench/allreduce_table.py (bench/allreduce_all.sh's merge) on those rows and a hand-written MPI
# output: the right cells and ratios, "n/a" for a world without an MPI run.
set -u
BENCH=bench/allreduce
[ -x "$BENCH" ] || BENCH="$(dirname "$0")/allreduce"
export TMPDIR="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"

out=$(timeout 60 "$BENCH" --world_sizes=2 --max_bytes=1024 --impls=ours,raw,shm,shm_buf,floor --format=json --target_ms=1 2>&1)
rows_out="$out"
rc=$?
[ "$rc" -eq 0 ] || { echo "$out" | tail -5; echo "FAIL: --impls=ours,raw,shm,shm_buf,floor exited $rc"; exit 1; }
echo "$out" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
sizes = [4 << i for i in range(9)]  # 4 B .. 1 KiB
seen = {}
for r in rows:
    key = (r["impl"], r["bytes"])
    assert key not in seen, "two rows for %s" % (key,)
    assert r["world_size"] == 2 and r["time_us"] > 0, r
    seen[key] = r
want = {(impl, b) for impl in ("ours", "raw", "shm", "shm_buf", "floor") for b in sizes}
assert set(seen) == want, "rows missing: %s, unexpected: %s" % (sorted(want - set(seen)), sorted(set(seen) - want))
for b in sizes:
    ours, raw, shm = (seen[(impl, b)]["time_us"] for impl in ("ours", "raw", "shm"))
    for impl in ("ours", "raw", "shm", "shm_buf", "floor"):
        r = seen[(impl, b)]
        # time_us has 2 decimals, so the ratios agree to rounding only.
        assert abs(r["ours_over_raw"] - ours / raw) <= 0.01 * ours / raw + 1e-3, r
        assert abs(r["over_ours"] - r["time_us"] / ours) <= 0.01 * r["time_us"] / ours + 1e-3, r
print("PASS: %d rows, one per impl and size, ratios consistent" % len(rows))
' || { echo "$out" | head -30; echo "FAIL: the rows of --impls=ours,raw,shm,shm_buf,floor"; exit 1; }

out=$(timeout 60 "$BENCH" --world_sizes=2 --max_bytes=8 --format=json --target_ms=1 2>&1)
impls=$(echo "$out" | grep '^{' | sed 's/.*"impl": "\([a-z_]*\)".*/\1/' | sort | uniq -c | tr -s ' ')
[ "$impls" = "$(printf ' 2 ours\n 2 raw')" ] || { echo "$out"; echo "FAIL: default impls gave: $impls"; exit 1; }
echo "PASS: the default times ours and raw only"

out=$("$BENCH" --impls=ours,nccl 2>&1)
rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "unknown implementation 'nccl'" ||
  { echo "$out"; echo "FAIL: --impls=ours,nccl was not refused by name (exit $rc)"; exit 1; }
echo "PASS: an unknown impl is refused by name"

for impl in ours raw shm shm_buf floor; do
  out=$(timeout 60 "$BENCH" --world_sizes=2 --max_bytes=4 --impls="$impl" --corrupt_check_at_rank=1 --target_ms=1 2>&1)
  rc=$?
  [ "$rc" -ne 0 ] && echo "$out" | grep -q "rank 0: $impl all-reduce of 1 floats gave 4 at element 0, expected 3" ||
    { echo "$out"; echo "FAIL: a wrong $impl result passed the check (exit $rc)"; exit 1; }
done
echo "PASS: the result check catches a wrong sum for ours, raw, shm, shm_buf and floor"

TABLE=bench/allreduce_table.py
[ -f "$TABLE" ] || TABLE="$(dirname "$0")/allreduce_table.py"
dir="$TMPDIR/allreduce_table"
mkdir -p "$dir"
{
  echo '{"bytes": 4, "time_us": 2.00, "impl": "shm", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 4.00, "impl": "shm_buf", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 3.20, "impl": "floor", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 100.00, "impl": "ours", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 90.00, "impl": "raw", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 5.00, "impl": "shm", "world_size": 3}'
} >"$dir/rows.json"
printf 'backend mpi, world 2\n       bytes    median_us   raw_mpi_us    iters\n           4          8.0          1.0       50\n' \
  >"$dir/mpi_w2.txt"
/usr/bin/python3 "$TABLE" --allreduce="$dir/rows.json" --mpi="2:1:$dir/mpi_w2.txt" --md="$dir/t.md" --csv="$dir/t.csv" \
  >/dev/null || { echo "FAIL: allreduce_table.py exited $?"; exit 1; }
grep -qx '| 4 | 2.0 | 4.0 | 3.2 | 100.0 | 90.0 | 8.0 | 1.0 | 0.020 | 0.040 | 2.000 | 4.000 | 1.250 |' "$dir/t.md" &&
  grep -q 'MPI columns n/a: no MPI run for world 3' "$dir/t.md" &&
  grep -qx '| 4 | 5.0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |' "$dir/t.md" &&
  grep -qx '2,4,2.00,4.00,3.20,100.00,90.00,8.00,1.00,0.0200,0.0400,2.0000,4.0000,1.2500' "$dir/t.csv" ||
  { cat "$dir/t.md" "$dir/t.csv"; echo "FAIL: allreduce_table.py's cells"; exit 1; }
# Three rounds: times are medians over the rounds, ratios medians of each round's own ratio (round 2's
# shm/gloo is 0.5, the others 0.02 and 0.05: median 0.05, though the median times give 2/100); a round
# without an MPI run leaves the MPI medians to the others.
{
  echo '{"bytes": 4, "time_us": 40.00, "impl": "shm", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 80.00, "impl": "ours", "world_size": 2}'
} >"$dir/rows2.json"
{
  echo '{"bytes": 4, "time_us": 3.00, "impl": "shm", "world_size": 2}'
  echo '{"bytes": 4, "time_us": 60.00, "impl": "ours", "world_size": 2}'
} >"$dir/rows3.json"
printf 'backend mpi, world 2\n       bytes    median_us   raw_mpi_us    iters\n           4          6.0          3.0       50\n' \
  >"$dir/mpi_w2_r3.txt"
/usr/bin/python3 "$TABLE" --allreduce="$dir/rows.json" --allreduce="$dir/rows2.json" --allreduce="$dir/rows3.json" \
  --mpi="2:1:$dir/mpi_w2.txt" --mpi="2:3:$dir/mpi_w2_r3.txt" --md="$dir/m.md" --csv="$dir/m.csv" >/dev/null &&
  grep -q '^2,4,3.00,4.00,3.20,80.00,90.00,7.00,2.00,0.0500,0.0400,1.5000,4.0000,1.2500$' "$dir/m.csv" ||
  { cat "$dir/m.md" "$dir/m.csv"; echo "FAIL: allreduce_table.py's medians over rounds"; exit 1; }
echo "PASS: allreduce_table.py takes medians over rounds, and of the rounds' ratios"
echo "$rows_out" >"$dir/real_rows.json"
/usr/bin/python3 "$TABLE" --allreduce="$dir/real_rows.json" --mpi_missing="test" --md="$dir/r.md" --csv="$dir/r.csv" \
  >/dev/null && [ "$(grep -c '^2,' "$dir/r.csv")" -eq 9 ] ||
  { cat "$dir/r.csv"; echo "FAIL: allreduce_table.py on bench/allreduce's rows: not one line per size"; exit 1; }
echo "PASS: allreduce_table.py merges the rows into the right cells"
