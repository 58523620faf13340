#!/usr/bin/env python3
"""Every example program on a GPU machine, each with the verdict it must get: the bug found at
its lines, the fix clean, every program a verdict. From the repository root:

    python3 python/tests/onegpu/acceptance.py OUT [--only REGEX] [--bin build/cli/shardcheck]
                                              [--recheck CASES]

Captures each case (python3 -m shardcheck.capture, the case's ranks on the one-GPU backend),
checks it with `shardcheck run --report`, and compares the findings with the case's expectation:
a finding of each expected kind whose key names each expected file:line, and no other finding.
Writes OUT/acceptance.md (a row per case) and OUT/acceptance.json; the captures go to
OUT/cases.tgz. With --recheck CASES it captures nothing and judges an earlier run's folders
(CASES/<case>, from its cases.tgz) with this checker, on any machine. Exits 1 when a case misses
its expectation, 2 on bad arguments.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
E = "examples/pytorch/"


def case(name, program, expect, ranks=2, args=(), env=None, timeout=40):
    """expect: [(kind, [file:line, ...]), ...] for a bug, [] for a program that must be clean.
    ranks=None: the program starts its own ranks (no --nproc-per-node)."""
    return {"name": name, "program": program, "args": list(args), "ranks": ranks,
            "env": env or {}, "expect": expect, "timeout": timeout}


def pair(name, program, expect, **kw):
    """The bug (no option) and its fix (--fix, clean)."""
    args = kw.pop("args", ())
    return [case(name, program, expect, args=args, **kw),
            case(name + "-fix", program, [], args=list(args) + ["--fix"], **kw)]


def _race(file, *lines):
    return ("stream_race", [f"{E}{file}:{n}" for n in lines])


def _value(kind, file, *lines):
    return (kind, [f"{E}{file}:{n}" for n in lines])


ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
GLOO = {"EXAMPLE_BACKEND": "gloo"}

CASES = [
    *pair("coalesced-reuse", E + "coalesced_reuse.py",
          [_race("coalesced_reuse.py", 33, 41), _race("coalesced_reuse.py", 34)]),
    *pair("coalesced-reuse-expandable", E + "coalesced_reuse.py",
          [_race("coalesced_reuse.py", 33, 41), _race("coalesced_reuse.py", 34)],
          env=EXPANDABLE),
    *pair("graph-replay", E + "graph_replay.py", [_race("graph_replay.py", 40, 43)]),
    *pair("graph-branches", E + "graph_branches.py", [_race("graph_branches.py", 46)]),
    *pair("grad-reuse-async", E + "grad_reuse_race.py", [_race("grad_reuse_race.py", 32, 38)],
          env=ASYNC),
    *pair("grad-reuse", E + "grad_reuse_race.py", [_race("grad_reuse_race.py", 32, 38)]),
    *pair("gloo-inplace", E + "gloo_inplace_race.py", [_race("gloo_inplace_race.py", 29)],
          env=GLOO),
    *pair("thread-prefetch", E + "thread_prefetch.py", [_race("thread_prefetch.py", 28, 47)]),
    *pair("thread-backward", E + "thread_backward.py", [_race("thread_backward.py", 25, 30)]),
    *pair("event-poll", E + "event_poll.py", [_race("event_poll.py", 29, 35)]),
    case("event-poll-stream-fix", E + "event_poll.py", [], args=["--fix", "--stream"]),
    *pair("data-prefetcher", E + "data_prefetcher.py", [_race("data_prefetcher.py", 33, 52)]),
    *pair("uninit-accumulator", E + "uninit_accumulator.py",
          [("uninitialized_read", [E + "uninit_accumulator.py:31",
                                   E + "uninit_accumulator.py:27"])]),
    *pair("missing-wait", E + "missing_wait.py", [_race("missing_wait.py", 24, 27)], ranks=4),
    *pair("spawn-missing-wait", E + "missing_wait.py", [_race("missing_wait.py", 24, 27)],
          ranks=None, args=["--spawn", "4"]),
    *pair("process-missing-wait", E + "missing_wait.py", [_race("missing_wait.py", 24, 27)],
          ranks=None, args=["--processes", "4"]),
    *pair("collective-order-bug", E + "collective_order_bug.py",
          [("collective_swap", [E + "collective_order_bug.py:20",
                                E + "collective_order_bug.py:21"])], ranks=4),
    *pair("cross-group-deadlock", E + "cross_group_deadlock.py",
          [("deadlock", [E + "cross_group_deadlock.py:34"])], ranks=4, timeout=12),
    *pair("swap-loop", E + "swap_loop.py", [("collective_swap", [E + "swap_loop.py:38"])],
          ranks=4),
    *pair("uneven-gather", E + "uneven_gather.py",
          [("collective_mismatch", [E + "uneven_gather.py:43"])], timeout=20),
    *pair("expert-parallel", E + "expert_parallel.py",
          [_value("divisor_mismatch", "expert_parallel.py", 91, 92)], ranks=4, timeout=25),
    *pair("double-reduction", E + "double_reduction.py",
          [_value("double_reduction", "double_reduction.py", 66)], ranks=4, timeout=25),
    *pair("double-reduction-ddp", E + "double_reduction.py",
          [_value("double_reduction", "double_reduction.py", 66)], ranks=4, args=["--ddp"],
          timeout=25),
    *pair("replica-drift", E + "replica_drift.py",
          [_value("missing_reduction", "replica_drift.py", 57)], ranks=4, timeout=25),
    *pair("replica-drift-lr", E + "replica_drift.py",
          [_value("replica_divergence", "replica_drift.py", 57)], ranks=4, args=["--scheduler"],
          timeout=25),
    *pair("tied-norm", E + "tied_norm.py", [_value("grad_norm_miscount", "tied_norm.py", 62)],
          timeout=25),
    *pair("tp-norm", E + "tp_norm.py", [_value("grad_norm_miscount", "tp_norm.py", 87)],
          timeout=25),
    *pair("dtensor-tp", E + "dtensor_tp.py", [_value("grad_norm_miscount", "dtensor_tp.py", 52)],
          timeout=25),
    *pair("main-grad-norm", E + "main_grad_norm.py",
          [_value("grad_norm_miscount", "main_grad_norm.py", 71)], timeout=25),
    case("ddp-train", E + "ddp_train.py", [], ranks=4, timeout=25),
    case("fsdp2-train", E + "fsdp2_train.py", [], ranks=4, timeout=25),
    case("fsdp2-hsdp", E + "fsdp2_train.py", [], ranks=4, args=["--hsdp"], timeout=25),
]


def capture(c, out, env):
    folder = os.path.join(out, "cases", c["name"])
    shutil.rmtree(folder, ignore_errors=True)
    ranks = [] if c["ranks"] is None else ["--nproc-per-node", str(c["ranks"])]
    cmd = [sys.executable, "-m", "shardcheck.capture", "--out", folder, *ranks,
           "--timeout", str(c["timeout"]), "--", c["program"], *c["args"]]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env={**env, **c["env"]}, capture_output=True,
                           text=True, timeout=c["timeout"] + 60)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", (e.stdout or b"").decode(errors="replace")
    return folder, rc, text, time.monotonic() - start


def check(binary, folder, out, name):
    report = os.path.join(out, "reports", name)
    shutil.rmtree(report, ignore_errors=True)
    p = subprocess.run([binary, "run", folder, "--report", report], cwd=ROOT,
                       capture_output=True, text=True)
    try:
        with open(os.path.join(report, "report.json"), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None, p.returncode, p.stdout + p.stderr
    found = [(f["kind"], f["key"]) for s in data["scenarios"] for f in s["findings"]]
    partial = any(s.get("partial") for s in data["scenarios"])
    return {"findings": found, "partial": partial}, p.returncode, p.stdout + p.stderr


def made_on(folder):
    """The device and torch a capture was made with (its first rank file's header), or None."""
    try:
        with open(os.path.join(folder, "rank-0.jsonl"), encoding="utf-8") as f:
            head = json.loads(f.readline())
        return f"{head['device']}, torch {head['torch']}"
    except (OSError, ValueError, KeyError):
        return None


def judge(expect, got):
    """'met', or why not: each expected (kind, sites) must match a finding of that kind whose
    key names every site, and every finding must be expected."""
    if got is None:
        return "no verdict"
    left = list(got["findings"])
    for kind, sites in expect:
        hit = next((f for f in left if f[0] == kind and all(s in f[1] for s in sites)), None)
        if hit is None:
            return f"missed {kind} at {', '.join(sites)}"
        left.remove(hit)
    extra = [f for f in left if not any(f[0] == k for k, _ in expect)]
    if extra:
        return "also found " + "; ".join(f"{k} ({key[:120]})" for k, key in extra)
    return "met"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", default="", help="a regex: run only the cases whose names match")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "cli", "shardcheck"))
    ap.add_argument("--recheck", metavar="CASES",
                    help="capture nothing: judge the folders of an earlier run's cases "
                         "(cases.tgz extracted: CASES/<case>) with --bin, on any machine")
    args = ap.parse_args(argv)
    try:
        only = re.compile(args.only)
    except re.error as e:
        ap.error(f"--only: {e}")
    if not os.access(args.bin, os.X_OK):
        ap.error(f"{args.bin}: no shardcheck binary there (make build, or --bin)")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    rows, where = [], {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "recheck": args.recheck}
    with open(os.path.join(args.out, "acceptance.log"), "w", encoding="utf-8") as log:
        for c in CASES:
            if not only.search(c["name"]):
                continue
            if args.recheck:
                folder = os.path.join(args.recheck, c["name"])
                if not os.path.isdir(folder):
                    continue
                rc, text, wall = "(recheck)", "", 0.0
            else:
                folder, rc, text, wall = capture(c, args.out, env)
            got, check_rc, said = check(args.bin, folder, args.out, c["name"])
            verdict = judge(c["expect"], got)
            where.setdefault("on", made_on(folder))
            rows.append({"name": c["name"], "capture_rc": rc, "wall_s": round(wall, 1),
                         "check_rc": check_rc, "verdict": verdict,
                         "findings": got["findings"] if got else None,
                         "partial": got["partial"] if got else None})
            log.write(f"== {c['name']}: {verdict}\n{text[-3000:]}\n{said[-3000:]}\n")
            log.flush()
            print(f"{c['name']:32} {verdict}", flush=True)
            write_results(args.out, rows, where, final=False)  # a run cut short keeps it
    write_results(args.out, rows, where)
    return 0 if all(r["verdict"] == "met" for r in rows) else 1


def write_results(out, rows, where, final=True):
    met = sum(r["verdict"] == "met" for r in rows)
    verdicts = sum(r["verdict"] != "no verdict" for r in rows)
    summary = f"{met} of {len(rows)} cases met their expectation; {verdicts} of {len(rows)} " \
              f"had a verdict"
    run = f"started {where['started']} on {where.get('on') or 'a machine no capture named'}"
    if where.get("recheck"):
        run = f"checked {where['started']} from the captures of {where['recheck']}, made on " \
              f"{where.get('on') or 'a machine no capture named'}"
    with open(os.path.join(out, "acceptance.json"), "w", encoding="utf-8") as f:
        json.dump({"summary": summary, "run": run, "cases": rows}, f, indent=1)
    with open(os.path.join(out, "acceptance.md"), "w", encoding="utf-8") as f:
        f.write(f"# Acceptance\n\n{summary} ({run})\n\n"
                "| case | capture exit | seconds | verdict |\n| --- | --- | --- | --- |\n")
        for r in rows:
            f.write(f"| {r['name']} | {r['capture_rc']} | {r['wall_s']} | {r['verdict']} |\n")
    if not final:
        return
    print(summary)
    if where.get("recheck"):
        return  # the cases are the earlier run's, where they were
    cases = os.path.join(out, "cases")
    if os.path.isdir(cases):
        with tarfile.open(os.path.join(out, "cases.tgz"), "w:gz") as t:
            t.add(cases, arcname="cases")
        shutil.rmtree(cases)


if __name__ == "__main__":
    sys.exit(main())
