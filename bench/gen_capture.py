#!/usr/bin/env python3
"""Writes a synthetic capture folder (docs/capture-format.md) of about N records per rank, for
measuring how fast `shardcheck run DIR` loads and checks a captured program.

    python3 bench/gen_capture.py --out /tmp/cap --ranks 2 --records 1000000
    /usr/bin/time -v ./build/cli/shardcheck run /tmp/cap --runs 1

Each rank repeats one layer of a data-parallel training step, the way a PyTorch program with
DistributedDataParallel records it: a forward op on the compute stream reading a parameter and
the previous activation, a gradient written on the compute stream and all-reduced on the
process group's NCCL stream with the events and record_stream calls ProcessGroupNCCL issues,
and the host freeing what it no longer holds. The program is race-free (the run is clean), so
every record is loaded, issued, executed and checked. Deterministic: no randomness.
"""

import argparse
import json
import os

PARAMS = 64  # parameters that exist before the capture (pre), used round-robin
ACT_BYTES = 1 << 20
GRAD_BYTES = 1 << 18


def write_rank(path, rank, ranks, records_wanted):
    lines = []
    count = 0

    def rec(obj):
        nonlocal count
        lines.append(json.dumps(obj, separators=(",", ":")))
        count += 1

    header = {"shardcheck_capture": 1, "rank": rank, "world_size": ranks, "torch": "synthetic",
              "device": "none", "argv": ["gen_capture.py"]}
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        rec({"k": "stream", "id": 0, "name": "default"})
        rec({"k": "stream", "id": 1, "name": "nccl:world"})
        rec({"k": "group", "id": 0, "name": "world", "ranks": list(range(ranks))})
        for i, (line, func) in enumerate([(10, "main"), (21, "forward"), (22, "forward"), (30, "backward"),
                                          (31, "backward"), (40, "allreduce_hook"), (41, "allreduce_hook"),
                                          (50, "step"), (51, "step")]):
            rec({"k": "site", "id": i, "file": "train.py", "line": line, "func": func})
        for p in range(PARAMS):
            rec({"k": "alloc", "buf": p, "bytes": GRAD_BYTES, "stream": 0, "at": 0, "pre": True})
        buf = PARAMS
        event = 0
        prev = None
        layer = 0
        while count < records_wanted:
            param = layer % PARAMS
            act = buf
            buf += 1
            rec({"k": "alloc", "buf": act, "bytes": ACT_BYTES, "stream": 0, "at": 1})
            reads = [[param, 0, GRAD_BYTES]] + ([[prev, 0, ACT_BYTES]] if prev is not None else [])
            rec({"k": "op", "name": "aten::addmm", "stream": 0, "r": reads, "w": [[act, 0, ACT_BYTES]], "at": 2})
            if prev is not None:
                rec({"k": "free", "buf": prev, "at": 2})
            prev = act
            grad = buf
            buf += 1
            rec({"k": "alloc", "buf": grad, "bytes": GRAD_BYTES, "stream": 0, "at": 3})
            rec({"k": "op", "name": "aten::mm", "stream": 0, "r": [[act, 0, ACT_BYTES // 4]],
                 "w": [[grad, 0, GRAD_BYTES]], "at": 4})
            # ProcessGroupNCCL: the NCCL stream waits for the caller's, runs the collective,
            # records the tensor's use, and the caller's stream waits at work.wait().
            rec({"k": "event_record", "event": event, "stream": 0, "at": 5})
            rec({"k": "event_wait", "event": event, "stream": 1, "at": 5})
            rec({"k": "coll", "op": "all_reduce", "group": 0, "stream": 1, "in": [grad, 0, GRAD_BYTES],
                 "out": [grad, 0, GRAD_BYTES], "dtype": "f32", "count": GRAD_BYTES // 4, "reduce": "sum",
                 "root": 0, "name": "grad", "at": 5})
            rec({"k": "record_stream", "buf": grad, "stream": 1, "at": 5})
            rec({"k": "event_record", "event": event + 1, "stream": 1, "at": 5})
            rec({"k": "event_wait", "event": event + 1, "stream": 0, "at": 6})
            event += 2
            rec({"k": "op", "name": "aten::add_", "stream": 0, "r": [[param, 0, GRAD_BYTES], [grad, 0, GRAD_BYTES]],
                 "w": [[param, 0, GRAD_BYTES]], "at": 7})
            rec({"k": "free", "buf": grad, "at": 8})
            layer += 1
            if len(lines) >= 10000:
                f.write("\n".join(lines) + "\n")
                lines.clear()
        rec({"k": "device_sync", "at": 8})
        lines.append(json.dumps({"k": "end", "records": count}))
        f.write("\n".join(lines) + "\n")
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--records", type=int, default=100000, help="records per rank (about)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for r in range(a.ranks):
        n = write_rank(os.path.join(a.out, "rank-%d.jsonl" % r), r, a.ranks, a.records)
    print("%s: %d ranks, %d records each" % (a.out, a.ranks, n))


if __name__ == "__main__":
    main()
