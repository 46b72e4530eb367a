#!/usr/bin/python3
"""Where two runs of the same work spend their CPU time differently: `perf record` samples per symbol of
run A against run B, largest differences first (what A adds, then what A saves).

Both recordings should cover the same work at the same sampling rate (e.g. 2-rank DDP against two single
processes at once, each rank and process taking the same number of steps), so that a sample count is a
CPU time: samples / frequency seconds. JIT code (oneDNN's GEMM kernels) is one row, the kernel's symbols
are prefixed [kernel], and any library's unknown addresses are one row per library.

  perf record -F 2000 -o /tmp/ddp.perf -- bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 \\
      bazel-bin/bench/train_throughput --steps=2000 --threads=1 --model=mlp --backend=shm
  perf record -F 2000 -o /tmp/pair.perf -- bash -c 'taskset -c 0 bazel-bin/bench/train_throughput \\
      --steps=2000 --threads=1 --model=mlp & taskset -c 1 bazel-bin/bench/train_throughput \\
      --steps=2000 --threads=1 --model=mlp; wait'
  python3 bench/perf_compare.py /tmp/ddp.perf /tmp/pair.perf --frequency=2000 --per=4040
"""
import argparse
import collections
import re
import subprocess
import sys

SEPARATOR = "\x1f"  # perf report -t: fields split by a byte no symbol or library name contains


def samples_by_symbol(path):
    """perf report's sample counts for `path`, summed per symbol (see the module's docstring)."""
    report = subprocess.run(["perf", "report", "-i", path, "-n", "--no-children", "--sort", "dso,sym", "--stdio",
                             "-t", SEPARATOR], capture_output=True, text=True)
    if report.returncode != 0:
        sys.exit(f"perf_compare: perf report -i {path} failed: {report.stderr.strip()}")
    counts = collections.Counter()
    for line in report.stdout.splitlines():
        fields = [f.strip() for f in line.split(SEPARATOR)]
        if line.startswith("#") or len(fields) != 4 or not fields[1].isdigit():
            continue
        samples, dso, symbol = int(fields[1]), fields[2], re.sub(r"^\[.\] ", "", fields[3])
        if "JIT" in dso:
            symbol = "[JIT]"
        elif "kernel" in dso:
            symbol = "[kernel] " + symbol
        elif symbol.startswith("0x"):
            symbol = f"[{dso}]"
        counts[symbol[:90]] += samples
    if not counts:
        sys.exit(f"perf_compare: no samples in {path}")
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="perf.data of run A")
    parser.add_argument("b", help="perf.data of run B")
    parser.add_argument("--rows", type=int, default=15, help="rows of each kind (added, saved)")
    parser.add_argument("--frequency", type=float, default=0, help="perf record's -F: also print CPU ms")
    parser.add_argument("--per", type=float, default=1, help="divide the CPU ms by this (e.g. rank-steps)")
    args = parser.parse_args()
    if args.per <= 0 or args.frequency < 0 or args.rows <= 0:
        sys.exit("perf_compare: --per and --rows must be positive, --frequency not negative")
    a, b = samples_by_symbol(args.a), samples_by_symbol(args.b)
    ms = (lambda n: f" {n * 1000.0 / args.frequency / args.per:10.3f}") if args.frequency else (lambda n: "")
    unit = " ms (A-B)" if args.frequency else ""
    print(f"samples: A {sum(a.values())}, B {sum(b.values())}, A-B {sum(a.values()) - sum(b.values()):+d}")
    print(f"{'A':>8} {'B':>8} {'A-B':>8}{unit:>11}  symbol")
    order = sorted(set(a) | set(b), key=lambda s: b[s] - a[s])
    added = [s for s in order if a[s] > b[s]][:args.rows]
    saved = [s for s in reversed(order) if a[s] < b[s]][:args.rows]
    for symbol in added + (["..."] if saved else []) + list(reversed(saved)):
        if symbol == "...":
            print("...")
            continue
        print(f"{a[symbol]:8d} {b[symbol]:8d} {a[symbol] - b[symbol]:+8d}{ms(a[symbol] - b[symbol])}  {symbol}")


if __name__ == "__main__":
    main()
