#!/usr/bin/python3
"""Turns bucket_sweep.sh's "label|json" lines (stdin) into a table (stdout) and a CSV file.

Usage: bucket_sweep_report.py CSV_PATH TITLE < rows
"""
import json
import sys


def main():
    csv_path, title = sys.argv[1], sys.argv[2]
    print(f"\n{title}")
    print("%17s %8s %9s %9s %11s %10s" % ("config (MiB)", "buckets", "step ms", "comm ms", "exposed ms", "samples/s"))
    with open(csv_path, "w") as csv:
        csv.write("index,config,buckets,step_ms,comm_ms,exposed_comm_ms,samples_per_s\n")
        for i, line in enumerate(sys.stdin):
            label, _, payload = line.rstrip("\n").partition("|")
            if not payload:
                print("%17s  (run failed)" % label)
                continue
            r = json.loads(payload)
            if label == "auto" and r.get("auto_caps"):
                label = "auto %s" % r["auto_caps"]  # the caps --bucket_cap_mb=auto chose
            print("%17s %8d %9.2f %9.2f %11.2f %10.0f" % (label, r["buckets"], r["step_ms"], r["comm_ms"],
                                                          r["exposed_comm_ms"], r["samples_per_s"]))
            csv.write('%d,"%s",%d,%.3f,%.3f,%.3f,%.1f\n' % (i, label, r["buckets"], r["step_ms"], r["comm_ms"],
                                                            r["exposed_comm_ms"], r["samples_per_s"]))


if __name__ == "__main__":
    main()
