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

Usage: allreduce_table.py --allreduce=ROWS.json [--mpi=W:FILE ...] [--mpi_failed=W:WHY ...]
                          [--mpi_missing=WHY] --md=OUT.md --csv=OUT.csv [--note=LINE ...]
"""
import argparse
import csv
import json
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


def world_table(world, sizes, mpi, mpi_problem):
    """The markdown lines and CSV rows of one world size."""
    lines = ["### World %d" % world, ""]
    if mpi_problem:
        lines += ["MPI columns n/a: %s" % mpi_problem, ""]
    lines += ["| bytes | shm µs | shm_buf µs | floor µs | gloo µs | raw gloo µs | mpi µs | raw MPI µs | shm/gloo | "
              "shm_buf/gloo | shm/raw MPI | shm_buf/raw MPI | shm_buf/floor |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    csv_rows = []
    for size in sorted(sizes):
        ours = sizes[size]
        shm, shm_buf, floor = ours.get("shm"), ours.get("shm_buf"), ours.get("floor")
        gloo, raw_gloo = ours.get("ours"), ours.get("raw")
        mpi_us, raw_mpi = mpi.get(size, (None, None))
        ratios = [ratio(shm, gloo), ratio(shm_buf, gloo), ratio(shm, raw_mpi), ratio(shm_buf, raw_mpi),
                  ratio(shm_buf, floor)]
        times = [shm, shm_buf, floor, gloo, raw_gloo, mpi_us, raw_mpi]
        lines.append("| %s | %s | %s |" % (
            human_bytes(size), " | ".join(micros(v) for v in times),
            " | ".join("n/a" if v is None else "%.3f" % v for v in ratios)))
        csv_rows.append([world, size] + ["" if v is None else "%.2f" % v for v in times] +
                        ["" if v is None else "%.4f" % v for v in ratios])
    return lines + [""], csv_rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allreduce", required=True, help="bench/allreduce JSON rows")
    parser.add_argument("--mpi", action="append", default=[], help="W:FILE, backend_allreduce_bench stdout")
    parser.add_argument("--mpi_failed", action="append", default=[], help="W:WHY, an MPI run that failed")
    parser.add_argument("--mpi_missing", default="", help="why no MPI run happened at all")
    parser.add_argument("--md", required=True)
    parser.add_argument("--csv", required=True)
    parser.add_argument("--note", action="append", default=[], help="a line printed above the tables")
    args = parser.parse_args()

    ours = read_allreduce(args.allreduce)
    mpi_files = {int(w): f for w, _, f in (item.partition(":") for item in args.mpi)}
    mpi_failed = {int(w): why for w, _, why in (item.partition(":") for item in args.mpi_failed)}
    lines = ["# All-reduce: shm, shm_buf, floor, gloo, raw gloo, mpi, raw MPI (float32 sum, median µs per call)", ""]
    lines += args.note + [""]
    csv_rows = []
    for world in sorted(ours):
        if args.mpi_missing:
            mpi, problem = {}, args.mpi_missing
        elif world in mpi_failed:
            mpi, problem = {}, mpi_failed[world]
        elif world in mpi_files:
            mpi, problem = read_mpi(mpi_files[world], world)
        else:
            mpi, problem = {}, "no MPI run for world %d" % world
        world_lines, world_csv = world_table(world, ours[world], mpi, problem)
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
