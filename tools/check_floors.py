#!/usr/bin/env python3
"""Proves that the floors of the house hold (//BUILD, README "Layout"): an arrow points only downward.

Two checks, both against FLOORS below, the design's chart of which package may use which:
  1. Every #include "<pkg>/..." in a floor package names a package that the chart allows.
  2. Bazel itself refuses every upward dependency: for each pair (lower, upper) that the chart forbids,
     a throw-away probe package inside the lower one (//<lower>/floor_probe_tmp) declares a cc_library
     that depends on a target of the upper one, and `bazel build --nobuild` (analysis only: seconds)
     must fail it with "is not visible". Every allowed pair is probed too and must pass, so the check
     cannot succeed by failing for another reason, and a visibility narrower than the chart is caught.
Prints one line per violation and a summary; exit status 0 only when both checks pass.
Usage (from the repository root, with Bazel on PATH): python3 tools/check_floors.py
"""
import os
import re
import shutil
import subprocess
import sys

# Which packages each floor package may depend on (itself always). testing/ (test-only helpers),
# tests/ and third_party/ sit beside the floors and are not probed.
FLOORS = {
    "base": set(),
    "io": {"base"},
    "tensor": {"base", "io"},
    "nn": {"base", "tensor", "io"},
    "data": {"base", "tensor", "io"},
    "store": {"base"},
    "comm": {"base", "tensor", "io", "store"},
    "reducer": {"base", "tensor", "io", "store", "comm"},
    "checkpoint": {"base", "tensor", "io", "nn", "data"},
    "launch": {"base", "io", "store"},
    "dp": {"base", "tensor", "io", "nn"},
    "ddp": {"base", "tensor", "io", "nn", "data", "store", "comm", "reducer", "checkpoint"},
    "sim": {"base", "tensor", "io", "nn", "reducer"},
    "train": {"base", "tensor", "io", "nn", "data", "store", "comm", "reducer", "checkpoint", "launch", "dp",
              "ddp", "sim"},
    "examples": {"base", "tensor", "io", "nn", "data", "store", "comm", "reducer", "checkpoint", "launch", "dp",
                 "ddp", "sim", "train"},
    "bench": {"base", "tensor", "io", "nn", "data", "store", "comm", "reducer", "checkpoint", "launch", "dp",
              "ddp", "sim", "train"},
}

# One library of each package that a probe depends on.
PROBE_TARGET = {
    "base": "//base:check",
    "store": "//store:store",
    "train": "//train:trainer",
    "tensor": "//tensor",
    "io": "//io:file",
    "nn": "//nn",
    "data": "//data",
    "comm": "//comm:process_group",
    "reducer": "//reducer",
    "checkpoint": "//checkpoint",
    "launch": "//launch:launcher",
    "dp": "//dp:data_parallel",
    "ddp": "//ddp",
    "sim": "//sim:step_simulator",
    "examples": None,  # programs only: nothing may depend on examples/
    "bench": None,  # nothing may depend on bench/
}

# Pairs the chart forbids that Bazel cannot refuse: base/, io/ and tensor/ are visible to every package
# (the bottom floors, base/ the lowest), so only the include check keeps a lower one from using a higher.
NOT_PROBED = {("io", "tensor"), ("base", "io"), ("base", "tensor"), ("store", "io"), ("store", "tensor"),
              ("launch", "tensor")}

PROBE_DIR = "floor_probe_tmp"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")


def present_floors():
    """The floor packages that exist in this checkout (io/ may not yet)."""
    return [p for p in FLOORS if os.path.isfile(os.path.join(p, "BUILD"))]


def include_violations(floors):
    """Lines '<file>:<line>: <pkg> includes <other>/... (upward)' for includes the chart forbids."""
    found = []
    for pkg in floors:
        for root, _, files in os.walk(pkg):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        other = m.group(1)
                        if other in FLOORS and other != pkg and other not in FLOORS[pkg]:
                            found.append(f"{path}:{number}: {pkg}/ includes {other}/ (not on a floor below)")
    return found


def write_probes(floors):
    """Writes one probe package per floor; returns {probe label: (lower, upper, allowed)}."""
    probes = {}
    for lower in floors:
        rules = []
        for upper in floors:
            target = PROBE_TARGET[upper]
            if upper == lower or target is None or (lower, upper) in NOT_PROBED:
                continue
            name = f"uses_{upper}"
            rules.append(f'cc_library(name = "{name}", deps = ["{target}"], tags = ["manual"])\n')
            probes[f"//{lower}/{PROBE_DIR}:{name}"] = (lower, upper, upper in FLOORS[lower])
        os.makedirs(os.path.join(lower, PROBE_DIR), exist_ok=True)
        with open(os.path.join(lower, PROBE_DIR, "BUILD"), "w") as f:
            f.write("# Written and removed by tools/check_floors.py.\n" + "".join(rules))
    return probes


def remove_probes(floors):
    for lower in floors:
        shutil.rmtree(os.path.join(lower, PROBE_DIR), ignore_errors=True)


def refused_probes(labels):
    """Runs one analysis over all probes; returns the set of probe labels Bazel refused as not visible."""
    result = subprocess.run(
        ["bazel", "build", "--nobuild", "--keep_going", *labels],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    refused = set()
    for line in result.stdout.splitlines():
        m = re.search(r"in cc_library rule (//\S+): target '\S+' is not visible", line)
        if m:
            refused.add(m.group(1))
    return refused, result.stdout


def visibility_violations(probes, refused):
    found = []
    for label, (lower, upper, allowed) in sorted(probes.items()):
        if allowed and label in refused:
            found.append(f"{label}: {lower}/ may use {upper}/ but Bazel refuses it (visibility narrower than the chart)")
        if not allowed and label not in refused:
            found.append(f"{label}: {lower}/ must not use {upper}/ but Bazel accepts it (upward dependency allowed)")
    return found


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    floors = present_floors()
    problems = include_violations(floors)
    probes = write_probes(floors)
    try:
        refused, log = refused_probes(sorted(probes))
    finally:
        remove_probes(floors)
    problems += visibility_violations(probes, refused)
    upward = sum(1 for _, _, allowed in probes.values() if not allowed)
    for line in problems:
        print("check_floors:", line)
    if problems and not refused:
        print(log[-3000:])
    print(f"check_floors: {len(floors)} floor packages, {upward} upward dependencies probed "
          f"({len(refused)} refused by Bazel), {len(probes) - upward} allowed ones probed, includes "
          f"checked: {'FAILED, ' + str(len(problems)) + ' violations' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
