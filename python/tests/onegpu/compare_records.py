"""Compares the collective records of two captures of one program: one rank on real NCCL and
one rank on the one-GPU backend (SHARDCHECK_ONE_GPU=1). The backend must record what NCCL's
capture records, in the same order: each collective's op, group, dtype, count, reduction,
root and name; whether it runs on the caller's default stream; and the event records around
it. Exits 0 when they agree, 1 naming the first difference.

    python3 python/tests/onegpu/compare_records.py CAPS/ddp-train-1-nccl CAPS/ddp-train-1-onegpu

python/tests/onegpu/run-on-gpu.sh runs it on the two DDP captures it makes."""

import json
import os
import sys


def records(folder):
    with open(os.path.join(folder, "rank-0.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f][1:]


def collectives(recs):
    groups = {r["id"]: r["name"] for r in recs if r["k"] == "group"}
    out = []
    for i, r in enumerate(recs):
        if r["k"] == "op" and r["name"].startswith("c10d::"):
            out.append(("op", r["name"], len(r["r"]), len(r["w"])))
            continue
        if r["k"] not in ("coll", "send", "recv"):
            continue
        before = next((p["k"] for p in reversed(recs[:i]) if p["k"].startswith("event")), None)
        after = next((p["k"] for p in recs[i + 1:] if p["k"].startswith("event")), None)
        out.append((r["k"], r.get("op"), groups.get(r["group"]), r.get("dtype"), r.get("count"),
                    r.get("reduce"), r.get("root"), r.get("name"), r["stream"] == 0, before, after))
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    nccl, ours = collectives(records(argv[1])), collectives(records(argv[2]))
    for i, (a, b) in enumerate(zip(nccl, ours)):
        if a != b:
            print("collective %d differs:\n  NCCL:    %s\n  backend: %s" % (i, a, b))
            return 1
    if len(nccl) != len(ours):
        print("NCCL's capture has %d collectives, the backend's %d" % (len(nccl), len(ours)))
        return 1
    print("the same %d collective records" % len(nccl))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
