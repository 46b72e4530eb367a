#!/usr/bin/env python3
"""Summarises a bench/bf16_compare.sh output file: per model, the median (min-max) step time of each run
kind over the rounds, and the per-round speed ratios BENCHMARKS.md "bf16 mixed precision" reports.

    python3 bench/bf16_compare_summary.py results/bench/bf16_compare_....txt

Run kinds: ours_fp32, ours_bf16, ours_bf16_variant (the VARIANT run, when present), ours_fp32_cl,
ours_bf16_cl (ours with --memory_format=channels_last, when present), torch_fp32, torch_bf16, and
torch_fp32_cl, torch_bf16_cl (PyTorch in torch.channels_last, when present); with PRECISIONS including
fp16, ours_fp16, torch_fp16 and torch_fp16_cl. A round starts at each
ours_fp32 run. "best" ratios take each side's faster layout within the round.
"""
import json
import statistics
import sys


def rounds_by_model(path):
    """{model: [{kind: step_ms}]} from the JSON lines of one bf16_compare.sh run."""
    models = {}
    variant_next = False
    with open(path) as f:
        for line in f:
            if line.startswith("# variant"):
                variant_next = True
                continue
            if not line.startswith("{"):
                continue
            run = json.loads(line)
            ms = run.get("step_ms_p50") or run.get("step_ms")
            kind = ("ours" if run["impl"] == "ddpengine" else "torch") + "_" + run["precision"]
            if variant_next:  # whatever its layout
                kind += "_variant"
                variant_next = False
            elif run.get("channels_last") or run.get("memory_format") == "channels_last":
                kind += "_cl"
            rounds = models.setdefault(run["model"], [])
            if kind == "ours_fp32" or not rounds:
                rounds.append({})
            rounds[-1][kind] = ms
    return models


def spread(values):
    return "%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values))


def ratio_spread(values):
    return "%.2fx (%.2f-%.2f)" % (statistics.median(values), min(values), max(values))


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: bf16_compare_summary.py FILE")
    for model, rounds in rounds_by_model(argv[1]).items():
        # A round is complete with ours and PyTorch in every precision the run measured (PRECISIONS=fp32
        # runs have no bf16 kinds).
        wanted = {"ours_fp32", "torch_fp32"} | ({"ours_bf16", "torch_bf16"} if any(
            "ours_bf16" in r for r in rounds) else set())
        complete = [r for r in rounds if wanted <= r.keys()]
        print("%s: %d complete rounds" % (model, len(complete)))
        for r in complete:
            for side in ("ours_fp32", "ours_bf16", "torch_fp32", "torch_bf16"):
                layouts = [r[k] for k in (side, side + "_cl") if k in r]
                if layouts:
                    r[side + "_best"] = min(layouts)
        for kind in ("ours_fp32", "ours_bf16", "ours_bf16_variant", "ours_fp32_cl", "ours_bf16_cl", "ours_fp16",
                     "torch_fp32", "torch_bf16", "torch_fp32_cl", "torch_bf16_cl", "torch_fp16", "torch_fp16_cl"):
            values = [r[kind] for r in complete if kind in r]
            if values:
                print("  %-18s %s ms" % (kind, spread(values)))
        for name, faster, slower in (("ours bf16 / ours fp32", "ours_bf16", "ours_fp32"),
                                     ("variant / ours fp32", "ours_bf16_variant", "ours_fp32"),
                                     ("ours bf16 cl / ours fp32", "ours_bf16_cl", "ours_fp32"),
                                     ("ours bf16 cl / ours fp32 cl", "ours_bf16_cl", "ours_fp32_cl"),
                                     ("best: ours bf16 / ours fp32", "ours_bf16_best", "ours_fp32_best"),
                                     ("best: ours bf16 vs torch bf16", "ours_bf16_best", "torch_bf16_best"),
                                     ("ours bf16 vs torch bf16", "ours_bf16", "torch_bf16"),
                                     ("variant vs torch bf16", "ours_bf16_variant", "torch_bf16"),
                                     ("ours fp32 vs torch fp32 cl", "ours_fp32", "torch_fp32_cl"),
                                     ("best: ours fp32 vs torch fp32", "ours_fp32_best", "torch_fp32_best"),
                                     ("ours bf16 vs torch bf16 cl", "ours_bf16", "torch_bf16_cl"),
                                     ("ours bf16 cl vs torch bf16 cl", "ours_bf16_cl", "torch_bf16_cl"),
                                     ("variant vs torch bf16 cl", "ours_bf16_variant", "torch_bf16_cl"),
                                     ("torch bf16 / torch fp32", "torch_bf16", "torch_fp32"),
                                     ("ours fp16 / ours fp32", "ours_fp16", "ours_fp32"),
                                     ("ours fp16 vs torch fp16", "ours_fp16", "torch_fp16"),
                                     ("ours fp16 vs torch fp16 cl", "ours_fp16", "torch_fp16_cl"),
                                     ("torch fp16 / torch fp32", "torch_fp16", "torch_fp32")):
            values = [r[slower] / r[faster] for r in complete if faster in r and slower in r]
            if values:
                print("  %-30s %s" % (name, ratio_spread(values)))


if __name__ == "__main__":
    main(sys.argv)
