#!/usr/bin/env python3
"""The floor a capture's reader is measured against: Python's json.loads of every line of a
capture folder's rank files, nothing else (no checks, nothing kept).

    python3 bench/capture/json_loads.py /tmp/cap --repeat 3

Prints the median over the repeats of the CPU time (time.process_time) and of the wall time of
one pass over every file, and the lines per second; the files are read once before, so the page
cache holds them, as it does for `shardcheck run DIR` measured after them.
"""

import argparse
import glob
import json
import os
import statistics
import time


def one_pass(paths):
    cpu, wall, lines = time.process_time(), time.perf_counter(), 0
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
                lines += 1
    return time.process_time() - cpu, time.perf_counter() - wall, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(a.dir, "rank-*.jsonl")))
    for path in paths:  # into the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    runs = [one_pass(paths) for _ in range(a.repeat)]
    cpu = statistics.median(r[0] for r in runs)
    wall = statistics.median(r[1] for r in runs)
    lines = runs[0][2]
    print("json.loads: %d lines, cpu %.2f s (%.0f ns a line), wall %.2f s, %d repeats" %
          (lines, cpu, 1e9 * cpu / lines, wall, a.repeat))


if __name__ == "__main__":
    main()
