#!/usr/bin/python3
"""Merges bench/allreduce_all.sh's measurements into one all-reduce table per world size.

Inputs: the JSON rows of `bench/allreduce --impls=ours,raw,shm,shm_buf,floor --format=json` (impl "ours" is
our ProcessGroupGloo, "raw" gloo::allreduce, "shm" our ProcessGroupShm, "shm_buf" ProcessGroupShm on tensors
from NewCommBuffer, read in place as DDP's buckets are, "floor" shm_buf's algorithm with nothing else,
bench/shm_floor.h) and, per world size, the stdout of
`mpirun -np W bench/backend_allreduce_bench --backend=mpi` (columns bytes, median_us, raw_mpi_us, iters:
our ProcessGroupMpi and a blocking MPI_Allreduce). Output: a markdown table per world size (columns shm,
shm_buf, floor, gloo, raw gloo, mpi, raw MPI in microseconds, then the time ratios of shm and shm_buf over
gloo and over raw MPI, below 1 when shm is faster, and of shm_buf over floor, 1 at the yardstick), on
stdout and in --md; the same numbers as CSV in --csv (one line per world and size;
empty cells where a program gave no number). A world whose MPI run is missing or failed gets "n/a"
in its MPI columns and a line saying why. Standard library only.

Several rounds (--allreduce given once per round, --mpi=W:ROUND:FILE): every time is the median over the
rounds that measured it, every ratio the median of the rounds' own ratios (a round's bench/allreduce
run and its MPI run are minutes apart; different rounds may be an hour apart on a drifting machine).

Usage: allreduce_table.py --allreduce=ROWS.json [--allreduce=ROUND2.json ...] [--mpi=W:ROUND:FILE ...]
                          [--mpi_failed=W:WHY ...] [--mpi_missing=WHY] --md=OUT.md --csv=OUT.csv
                          [--note=LINE ...]
"""
import argparse
import csv
import json
import statistics
import sys


def human_bytes(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return str(n)


def micros(value):
    if value is None:
        return "n/a"
    return "%.1f" % value if value < 1000 else "{:,.0f}".format(value)


def ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def read_allreduce(path):
    """{world: {bytes: {impl: time_us}}} from bench/allreduce's JSON rows."""
    table = {}
    with open(path) as rows:
        for line in rows:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            table.setdefault(r["world_size"], {}).setdefault(r["bytes"], {})[r["impl"]] = r["time_us"]
    return table


def read_mpi(path, world):
    """({bytes: (mpi_us, raw_mpi_us)}, problem or None) from backend_allreduce_bench's stdout."""
    try:
        with open(path) as text:
            lines = text.read().splitlines()
    except OSError as e:
        return {}, "cannot read %s: %s" % (path, e)
    expected = "backend mpi, world %d" % world
    if not lines or lines[0].strip() != expected:
        return {}, "%s does not start with '%s' (see the file)" % (path, expected)
    rows = {}
    for line in lines[2:]:
        fields = line.split()
        if len(fields) == 4 and fields[0].isdigit():
            rows[int(fields[0])] = (float(fields[1]), float(fields[2]))
    return rows, None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def world_table(world, rounds, mpi_rounds, problems):
    """The markdown lines and CSV rows of one world size.

    rounds: per round, {bytes: {impl: time_us}} of this world; mpi_rounds: per round, {bytes: (mpi_us,
    raw_mpi_us)} ({} where that round has no MPI run); problems: lines to print above the table."""
    lines = ["### World %d" % world, ""]
    prefix = "MPI columns n/a: " if not any(mpi_rounds) else "MPI columns, some rounds missing: "
    lines += [prefix + p for p in problems] + ([""] if problems else [])
    lines += ["| bytes | shm µs | shm_buf µs | floor µs | gloo µs | raw gloo µs | mpi µs | raw MPI µs | shm/gloo | "
              "shm_buf/gloo | shm/raw MPI | shm_buf/raw MPI | shm_buf/floor |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    csv_rows = []
    for size in sorted(set().union(*[r.keys() for r in rounds])):
        per_round_times, per_round_ratios = [], []
        for ours, mpi in zip(rounds, mpi_rounds):
            ours = ours.get(size, {})
            shm, shm_buf, floor = ours.get("shm"), ours.get("shm_buf"), ours.get("floor")
            gloo, raw_gloo = ours.get("ours"), ours.get("raw")
            mpi_us, raw_mpi = mpi.get(size, (None, None))
            per_round_times.append([shm, shm_buf, floor, gloo, raw_gloo, mpi_us, raw_mpi])
            per_round_ratios.append([ratio(shm, gloo), ratio(shm_buf, gloo), ratio(shm, raw_mpi),
                                     ratio(shm_buf, raw_mpi), ratio(shm_buf, floor)])
        times = [median(column) for column in zip(*per_round_times)]
        ratios = [median(column) for column in zip(*per_round_ratios)]
        lines.append("| %s | %s | %s |" % (
            human_bytes(size), " | ".join(micros(v) for v in times),
            " | ".join("n/a" if v is None else "%.3f" % v for v in ratios)))
        csv_rows.append([world, size] + ["" if v is None else "%.2f" % v for v in times] +
                        ["" if v is None else "%.4f" % v for v in ratios])
    return lines + [""], csv_rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allreduce", action="append", required=True,
                        help="bench/allreduce JSON rows, once per round")
    parser.add_argument("--mpi", action="append", default=[],
                        help="W:ROUND:FILE, backend_allreduce_bench stdout (ROUND counts from 1)")
    parser.add_argument("--mpi_failed", action="append", default=[], help="W:WHY, an MPI run that failed")
    parser.add_argument("--mpi_missing", default="", help="why no MPI run happened at all")
    parser.add_argument("--md", required=True)
    parser.add_argument("--csv", required=True)
    parser.add_argument("--note", action="append", default=[], help="a line printed above the tables")
    args = parser.parse_args()

    ours_rounds = [read_allreduce(path) for path in args.allreduce]
    ours = sorted(set().union(*[r.keys() for r in ours_rounds]))
    mpi_files = {}
    for item in args.mpi:
        world, round_number, path = item.split(":", 2)
        mpi_files[(int(world), int(round_number))] = path
    mpi_failed = {}
    for item in args.mpi_failed:
        world, _, why = item.partition(":")
        mpi_failed.setdefault(int(world), []).append(why)
    lines = ["# All-reduce: shm, shm_buf, floor, gloo, raw gloo, mpi, raw MPI (float32 sum, median µs per call)", ""]
    lines += args.note + [""]
    csv_rows = []
    for world in ours:
        problems = [args.mpi_missing] if args.mpi_missing else list(mpi_failed.get(world, []))
        mpi_rounds = []
        for round_number in range(1, len(ours_rounds) + 1):
            path = mpi_files.get((world, round_number))
            rows, problem = read_mpi(path, world) if path else ({}, None)
            if problem:
                problems.append(problem)
            mpi_rounds.append(rows)
        if not args.mpi_missing and not any(mpi_rounds) and not problems:
            problems.append("no MPI run for world %d" % world)
        world_lines, world_csv = world_table(world, [r.get(world, {}) for r in ours_rounds], mpi_rounds, problems)
        lines += world_lines
        csv_rows += world_csv
    if not ours:
        lines.append("No rows from bench/allreduce (see its output above).")
    text = "\n".join(lines)
    print(text)
    with open(args.md, "w") as md:
        md.write(text + "\n")
    with open(args.csv, "w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["world_size", "bytes", "shm_us", "shm_buf_us", "floor_us", "gloo_us", "raw_gloo_us",
                         "mpi_us", "raw_mpi_us", "shm_over_gloo", "shm_buf_over_gloo", "shm_over_raw_mpi",
                         "shm_buf_over_raw_mpi", "shm_buf_over_floor"])
        writer.writerows(csv_rows)
    return 0 if ours else 1


if __name__ == "__main__":
    sys.exit(main())
