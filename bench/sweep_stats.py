#!/usr/bin/env python3
"""How far an interleaved bucket sweep resolves its configurations from one another.

Reads the JSON rows of `bench/bucket_sweep.sh --interleaved` (each configuration's per-round step times,
`step_ms_rounds`) and prints, per configuration: the median over rounds, a bootstrap 90% interval of that
median, and whether it is distinguishable from the fastest fixed cap. Then a permutation test of the
hypothesis "the fixed caps run the same step time" (the statistic: the spread of the per-cap medians;
the rounds' values shuffled between caps, 20,000 times): a large p-value says the sweep cannot tell the
caps apart, so which cap measured fastest is the noise's choice, not the caps'.

Usage: python3 bench/sweep_stats.py SWEEP.jsonl [--seed=0] [--permutations=20000]
The rows named default, auto, single_allreduce and no_overlap are reported but left out of the test:
default and auto repeat a fixed cap's layout, and the last two change the schedule, not the cap.
"""

import json
import random
import statistics
import sys

NOT_A_CAP = ("default", "auto", "single_allreduce", "no_overlap")


def is_fixed_cap(config):
    return not config.startswith(NOT_A_CAP)


def bootstrap_interval(values, rng, draws=4000, level=0.90):
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    lo = medians[int((1 - level) / 2 * draws)]
    hi = medians[int((1 + level) / 2 * draws) - 1]
    return lo, hi


def spread_of_medians(groups):
    medians = [statistics.median(g) for g in groups]
    return max(medians) - min(medians)


def permutation_p_value(groups, rng, permutations):
    observed = spread_of_medians(groups)
    pooled = [v for g in groups for v in g]
    sizes = [len(g) for g in groups]
    at_least = 0
    for _ in range(permutations):
        rng.shuffle(pooled)
        shuffled, start = [], 0
        for size in sizes:
            shuffled.append(pooled[start:start + size])
            start += size
        if spread_of_medians(shuffled) >= observed:
            at_least += 1
    return observed, (at_least + 1) / (permutations + 1)


def parse_args(argv):
    path, seed, permutations = None, 0, 20000
    for arg in argv[1:]:
        if arg.startswith("--seed="):
            seed = int(arg.split("=", 1)[1])
        elif arg.startswith("--permutations="):
            permutations = int(arg.split("=", 1)[1])
        elif arg.startswith("--"):
            sys.exit(f"sweep_stats: unknown flag {arg} (flags: --seed=N --permutations=N)")
        elif path is None:
            path = arg
        else:
            sys.exit(f"sweep_stats: one sweep file expected, got a second: {arg}")
    if path is None:
        sys.exit("usage: python3 bench/sweep_stats.py SWEEP.jsonl [--seed=0] [--permutations=20000]")
    return path, seed, permutations


def read_rows(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rounds = [float(v) for v in row["step_ms_rounds"]]
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"sweep_stats: {path}:{number}: not a sweep row with step_ms_rounds ({e})")
            if len(rounds) < 2:
                sys.exit(f"sweep_stats: {path}:{number}: {row.get('config')} has {len(rounds)} round(s); "
                         "the statistics need the rounds of an --interleaved sweep (--rounds >= 2)")
            rows.append((str(row["config"]), rounds))
    if not any(is_fixed_cap(c) for c, _ in rows):
        sys.exit(f"sweep_stats: {path}: no fixed-cap configuration in the sweep")
    return rows


def main(argv):
    path, seed, permutations = parse_args(argv)
    rows = read_rows(path)
    rng = random.Random(seed)
    caps = [(c, v) for c, v in rows if is_fixed_cap(c)]
    best_config, best_values = min(caps, key=lambda cv: statistics.median(cv[1]))
    best_lo, best_hi = bootstrap_interval(best_values, rng)
    print(f"{'config':18s} {'rounds':>6s} {'median ms':>10s} {'90% interval':>17s} {'vs best':>8s}  resolved")
    for config, values in rows:
        median = statistics.median(values)
        lo, hi = bootstrap_interval(values, rng)
        versus = (median / statistics.median(best_values) - 1) * 100
        resolved = "best" if config == best_config else ("slower" if lo > best_hi else "no (overlaps)")
        print(f"{config:18s} {len(values):6d} {median:10.1f} {lo:8.1f}-{hi:8.1f} {versus:+7.1f}%  {resolved}")
    spread, p = permutation_p_value([v for _, v in caps], rng, permutations)
    print(f"fixed caps: {len(caps)}; spread of their medians {spread:.1f} ms "
          f"({spread / statistics.median(best_values) * 100:.1f}% of the best); permutation p {'< 0.001' if p < 0.001 else f'= {p:.3f}'} "
          f"({permutations} shuffles): " +
          ("the caps differ beyond the noise" if p < 0.05 else "not distinguishable from noise"))


if __name__ == "__main__":
    main(sys.argv)
