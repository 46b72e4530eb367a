#!/usr/bin/env python3
"""oneDNN's time in one training step, by primitive kind and pass, from a DNNL_VERBOSE=1 log of a run of
`steps` identical steps (warm-up included): the exec lines are split into `steps` equal parts and the last
part (the last step, after every primitive is created) is summed. Verbose mode itself slows the step.

    DNNL_VERBOSE=1 chrt -f 5 taskset -c 1 bazel-bin/bench/train_throughput --model=resnet18 \\
        --precision=bf16 --steps=2 --warmup=1 --threads=1 > LOG
    python3 bench/onednn_verbose_summary.py LOG 3
"""
import collections
import sys


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: onednn_verbose_summary.py LOG STEPS")
    steps = int(argv[2])
    execs = []
    with open(argv[1]) as f:
        for line in f:
            fields = line.strip().split(",")
            if fields[0] in ("onednn_verbose", "dnnl_verbose") and len(fields) > 5 and fields[1] == "exec":
                execs.append(fields)
    if not execs or len(execs) % steps != 0:
        sys.exit("%d exec lines do not split into %d equal steps" % (len(execs), steps))
    last = execs[-len(execs) // steps:]
    totals = collections.defaultdict(lambda: [0, 0.0])
    for fields in last:
        key = (fields[3], fields[5], fields[4].split(":")[0])  # kind, propagation, implementation family
        totals[key][0] += 1
        totals[key][1] += float(fields[-1])
    for (kind, prop, impl), (calls, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print("%-12s %-18s %-6s %5d calls %9.1f ms" % (kind, prop, impl, calls, ms))
    print("oneDNN ms in one step: %.1f" % sum(ms for _, ms in totals.values()))


if __name__ == "__main__":
    main(sys.argv)
