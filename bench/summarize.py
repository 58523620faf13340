#!/usr/bin/env python3
"""The simulator's benchmark figures, from the files one `make bench` run writes.

    summarize.py RESULTS_DIR
        The short table `make bench` prints: headline figures from the Google Benchmark JSON
        files bench/run-benchmarks wrote, each against its target, with the fitted growth
        exponents and the peer ratios.
    summarize.py render [--results DIR] [--write] [FILES...]
        Regenerates every block between <!-- bench:NAME --> and <!-- /bench:NAME --> in FILES
        (default: README.md and bench/README.md) from DIR (default: the committed
        bench/results/, which `make bench` refreshes). Prints the differences, or with --write
        rewrites the files.
    summarize.py merge OUT.json PASS.json...
        One Google Benchmark file from several passes of one program (bench/run-benchmarks):
        every pass's run of a benchmark, and where it ran in more than one pass their median,
        field by field, as Google Benchmark's own median aggregate.
    summarize.py check [--results DIR] [FILES...]
        Exit 1 when a block differs from what render makes of DIR: a figure typed by hand or
        left from another run.

Python standard library only.
"""
import argparse
import difflib
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RESULTS = os.path.join(ROOT, "bench", "results")
DEFAULT_FILES = [os.path.join("docs", "limits.md"), os.path.join("bench", "README.md")]
BLOCK = re.compile(r"<!-- bench:([a-z0-9-]+) -->\n(.*?)<!-- /bench:\1 -->", re.S)

TARGET_OPS_PER_S = 1e6
TARGET_FIRST_DETECTION_S = 1.0
TARGET_PEER_PROCESS_RATIO = 100.0
TARGET_PEER_CHECK_RATIO = 10.0
TARGET_SCALE_STEP_S = 60.0
TARGET_SCALE_GIB = 8.0
PROGRAMS = ("sim_bench", "training_bench", "catalog_bench", "peer_bench")


def load(results, program):
    path = os.path.join(results, program + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        runs = json.load(f)["benchmarks"]

    def plain(name):  # "BM_X/8/iterations:3/repeats:1/real_time" -> "BM_X/8"
        return "/".join(p for p in name.split("/")
                        if p != "real_time" and not p.startswith(("iterations:", "repeats:")))

    # With --benchmark_repetitions, the median of the repetitions; otherwise the one run.
    chosen = {}
    for r in runs:
        key = plain(r.get("run_name", r["name"]))
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median":
            chosen[key] = r
        elif r.get("run_type", "iteration") == "iteration" and r.get("repetitions", 1) <= 1:
            chosen.setdefault(key, r)
        elif r.get("run_type", "iteration") == "iteration" and r.get("error_occurred"):
            chosen.setdefault(key, r)  # a failed benchmark has no aggregates
    for key, r in chosen.items():
        r["plain"] = key
    return chosen


def seconds(run, field="real_time"):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[run["time_unit"]]
    return run[field] * scale


def ok(run):
    return run is not None and not run.get("error_occurred")


def fmt_time(s):
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def fmt_rate(x):
    return f"{x / 1e6:.2f} M/s" if x >= 1e6 else f"{x / 1e3:.0f} k/s"


def verdict(met):
    return "met" if met else "MISSED"


def fit_exponent(points):
    """Least-squares slope of log(time) against log(n): time ~ n^b."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


class Results:
    """One run's files: the four programs' JSON, machine.txt and scaling/."""

    def __init__(self, path):
        self.path = path
        self.programs = {p: load(path, p) for p in PROGRAMS}
        self.machine = read(os.path.join(path, "machine.txt"))
        self.scaling = read(os.path.join(path, "scaling", "cpu_scaling.md"))

    def field(self, name):  # "date:    2026-..." from machine.txt
        for line in (self.machine or "").splitlines():
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
        return None


def read(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


class Table:
    def __init__(self):
        self.lines = []

    def row(self, label, value, target="", status=""):
        self.lines.append(f"  {label:<58} {value:<20} {target:<12} {status}".rstrip())

    def text(self):
        return "\n".join(self.lines) + "\n"


def simulator(t, sim):
    for ranks in (2, 8, 64):
        on, off = sim.get(f"BM_SimOps_DetectorsOn/{ranks}"), sim.get(f"BM_SimOps_DetectorsOff/{ranks}")
        if not (ok(on) and ok(off)):
            t.row(f"simulator ops/s, {ranks} ranks", "not run")
            continue
        t.row(f"simulator ops/s, detectors on, {ranks} ranks", fmt_rate(on["ops_per_s"]), ">= 1 M/s",
              verdict(on["ops_per_s"] >= TARGET_OPS_PER_S))
        t.row(f"simulator ops/s, detectors off, {ranks} ranks", fmt_rate(off["ops_per_s"]))
        t.row("  throughput with detectors on / off", f"{on['ops_per_s'] / off['ops_per_s']:.2f}")
    for kind, label in (("ShadowOnly", "no values"), ("FixedModel", "fixed model")):
        for ranks in (2, 8, 64, 256):
            run = sim.get(f"BM_SimOps_DetectorsOn_{kind}/{ranks}")
            if ok(run):
                t.row(f"simulator ops/s, detectors on, {label}, {ranks} ranks", fmt_rate(run["ops_per_s"]),
                      ">= 1 M/s", verdict(run["ops_per_s"] >= TARGET_OPS_PER_S))
    off = sim.get("BM_SimOps_DetectorsOff_FixedModel/64")
    if ok(off):
        t.row("simulator ops/s, detectors off, fixed model, 64 ranks", fmt_rate(off["ops_per_s"]))


SCALE_STEPS = (("BM_ScaleStep_Zero3_1024", "ZeRO-3, dp = 1024", "zero3-1024.yaml"),
               ("BM_ScaleStep_Hsdp_32x32", "HSDP, 32 x 32", "hsdp-32x32.yaml"))


def scale_met(run):
    return seconds(run) < TARGET_SCALE_STEP_S and run["peak_rss_gib"] < TARGET_SCALE_GIB


def training(t, tr):
    for name, label, _ in SCALE_STEPS:
        run = tr.get(name)
        if not ok(run):
            t.row(f"training step on 1024 ranks, {label}", "not run")
            continue
        t.row(f"training step on 1024 ranks, {label}, 12 layers",
              f"{fmt_time(seconds(run))}, {run['peak_rss_gib']:.2f} GiB", "< 60 s, 8 GiB", verdict(scale_met(run)))
    step = tr.get("BM_TrainingStep_Zero3")
    if ok(step):
        t.row("training step: ZeRO-3, 8 ranks, 12 layers, 4 microbatches", fmt_time(seconds(step)))
        t.row("  its simulated ops/s (every detector and the oracle on)", fmt_rate(step["ops_per_s"]))
    off = tr.get("BM_TrainingStep_Zero3_DetectorsOff")
    if ok(step) and ok(off):
        t.row("  the same with the detectors off (the oracle on)", fmt_time(seconds(off)), fmt_rate(off["ops_per_s"]))
        t.row("  throughput with detectors on / off", f"{step['ops_per_s'] / off['ops_per_s']:.2f}")
    ref = tr.get("BM_Reference_Zero3")
    if ok(ref):
        t.row("  single-rank reference (once per scenario)", fmt_time(seconds(ref)))
    for axis, fixed in (("Ranks", "12 layers"), ("Layers", "8 ranks")):
        runs = sorted((r for n, r in tr.items() if n.startswith(f"BM_Scaling_{axis}/") and ok(r)),
                      key=lambda r: int(r["plain"].split("/")[1]))
        if len(runs) < 2:
            t.row(f"scaling with {axis.lower()}", "not run")
            continue
        pts = [(int(r["plain"].split("/")[1]), seconds(r)) for r in runs]
        b_all, b_top = fit_exponent(pts), fit_exponent(pts[-4:])
        span = f"{pts[0][0]}..{pts[-1][0]} {axis.lower()}, {fixed}"
        t.row(f"scaling with {span}", f"time ~ n^{b_all:.2f}", f"(top 4: n^{b_top:.2f})")
        t.row("  " + ", ".join(f"{n}: {fmt_time(s)}" for n, s in pts[:4]), "")
        t.row("  " + ", ".join(f"{n}: {fmt_time(s)}" for n, s in pts[4:]), "")


def catalog(t, cat):
    explore = [r for n, r in cat.items() if n.startswith("BM_Explore/") and ok(r)]
    if explore:
        schedules = sum(r["schedules"] for r in explore)
        total_s = sum(seconds(r) for r in explore)
        t.row(f"schedules explored per second, catalog ({len(explore)} files)", f"{schedules / total_s:.1f}/s",
              f"({schedules:.0f} in {fmt_time(total_s)})")
    scaling = sorted((r for n, r in cat.items() if n.startswith("BM_ThreadScaling/") and ok(r)),
                     key=lambda r: int(r["plain"].split("/")[1]))
    if scaling:
        base = scaling[0]["schedules_per_s"]
        t.row("thread scaling, one exploration (-j N)",
              ", ".join(f"{r['plain'].split('/')[1]}: {r['schedules_per_s']:.1f}/s" for r in scaling),
              "speedup " + ", ".join(f"{r['schedules_per_s'] / base:.2f}x" for r in scaling))
    first = sorted((r for n, r in cat.items() if n.startswith("BM_FirstDetection/")), key=lambda r: r["plain"])
    if not first:
        return
    found = [r for r in first if ok(r)]
    worst = max((seconds(r) for r in found), default=float("inf"))
    met = len(found) == len(first) and worst < TARGET_FIRST_DETECTION_S
    t.row(f"first detection, each catalog bug ({len(found)}/{len(first)} found)", f"slowest {fmt_time(worst)}",
          "< 1 s each", verdict(met))
    for r in first:
        name = r["plain"].split("/", 1)[1]
        if ok(r):
            t.row(f"  {name}", fmt_time(seconds(r)), f"schedule {r['schedules']:.0f}", r.get("label", ""))
        else:
            t.row(f"  {name}", "NOT FOUND", "", r.get("error_message", ""))


def peer_figures(pb):
    lib, proc, gloo = pb.get("BM_Compare_Shardcheck"), pb.get("BM_Compare_ShardcheckProcess"), pb.get("BM_Peer_GlooEquivalence")
    if not (ok(lib) and ok(proc) and ok(gloo)):
        return None
    return {"lib": seconds(lib), "proc": seconds(proc), "check": gloo["check_s"], "gloo": seconds(gloo),
            "check_ratio": gloo["check_s"] / seconds(lib), "process_ratio": seconds(gloo) / seconds(proc)}


def peer(t, pb):
    f = peer_figures(pb)
    if f is None:
        gloo = pb.get("BM_Peer_GlooEquivalence")
        t.row("peer comparison", "not run", "", gloo.get("error_message", "") if gloo else "not run")
        return
    t.row("shardcheck compare ZeRO-1 vs DistOpt, in process", fmt_time(f["lib"]))
    t.row("shardcheck compare ZeRO-1 vs DistOpt, as a process", fmt_time(f["proc"]))
    t.row("gloo peer, 4 processes: the check itself", fmt_time(f["check"]))
    t.row("gloo peer, 4 processes: as a process", fmt_time(f["gloo"]))
    t.row("  faster than the peer, check against check", f"{f['check_ratio']:.1f}x", ">= 10x",
          verdict(f["check_ratio"] >= TARGET_PEER_CHECK_RATIO))
    t.row("  faster than the peer, process against process", f"{f['process_ratio']:.1f}x", ">= 100x",
          verdict(f["process_ratio"] >= TARGET_PEER_PROCESS_RATIO))


def summary(res):
    t = Table()
    t.row("figure", "value", "target", "")
    simulator(t, res.programs["sim_bench"])
    training(t, res.programs["training_bench"])
    catalog(t, res.programs["catalog_bench"])
    peer(t, res.programs["peer_bench"])
    return t.text()


# ---- the blocks of README.md and bench/README.md


def provenance(res, what="`make bench`"):
    parts = [what]
    for name, label in (("date", None), ("machine", None), ("commit", "commit"), ("compiler", None)):
        value = res.field(name)
        if value:
            parts.append(f"{label} {value}" if label else value)
    return "_" + "; ".join(parts) + "._\n"


def not_run(res, what):
    return f"_Not in these results ({os.path.relpath(res.path, ROOT)}): {what} was not run._\n"


def render_results(res):
    if not any(res.programs.values()):
        return not_run(res, "`make bench`")
    return provenance(res) + "\n```\n" + (res.machine or "").rstrip() + "\n\n" + summary(res) + "```\n"


def render_targets(res):
    sim, tr, pb = (res.programs[p] for p in ("sim_bench", "training_bench", "peer_bench"))
    if not (sim or tr or pb):
        return not_run(res, "`make bench`")
    rows = []
    on = {r: sim.get(f"BM_SimOps_DetectorsOn/{r}") for r in (2, 8, 64)}
    fixed = sim.get("BM_SimOps_DetectorsOn_FixedModel/64")
    shadow = sim.get("BM_SimOps_DetectorsOn_ShadowOnly/64")
    if all(ok(v) for v in on.values()):
        text = (f"growing model (256 elements per rank of the world): {fmt_rate(on[2]['ops_per_s'])} at 2 ranks, "
                f"{fmt_rate(on[8]['ops_per_s'])} at 8, {fmt_rate(on[64]['ops_per_s'])} at 64 "
                f"({verdict(on[64]['ops_per_s'] >= TARGET_OPS_PER_S)} at 64)")
        if ok(fixed):
            text += (f"; fixed model (the 2-rank program's tensors at every rank count): "
                     f"{fmt_rate(fixed['ops_per_s'])} at 64 ranks ({verdict(fixed['ops_per_s'] >= TARGET_OPS_PER_S)})")
        if ok(shadow):
            text += (f"; without values: {fmt_rate(shadow['ops_per_s'])} at 64 ranks "
                     f"({verdict(shadow['ops_per_s'] >= TARGET_OPS_PER_S)})")
        rows.append(("≥ 1 M simulated operations per second with every detector on, at 64 ranks", text))
    steps = [(label, tr.get(name)) for name, label, _ in SCALE_STEPS]
    if all(ok(r) for _, r in steps):
        text = "; ".join(f"{label}: {fmt_time(seconds(r))} wall, {fmt_time(seconds(r, 'cpu_time'))} CPU, "
                         f"{r['peak_rss_gib']:.2f} GiB ({verdict(scale_met(r))})" for label, r in steps)
        rows.append(("a ZeRO-3 and an HSDP 32 × 32 TinyLM step on 1024 ranks, every detector on: < 60 s, < 8 GiB, one core", text))
    cat = res.programs["catalog_bench"]
    first = [r for n, r in cat.items() if n.startswith("BM_FirstDetection/")]
    if first:
        found = [r for r in first if ok(r)]
        worst = max(found, key=seconds) if found else None
        text = f"{len(found)}/{len(first)} found"
        if worst:
            text += f", the slowest {fmt_time(seconds(worst))} ({worst['plain'].split('/', 1)[1]})"
        met = len(found) == len(first) and worst is not None and seconds(worst) < TARGET_FIRST_DETECTION_S
        rows.append(("every catalog bug found in under 1 s", f"{text} ({verdict(met)})"))
    f = peer_figures(pb)
    if f:
        rows.append(("≥ 100× the gloo peer, process against process", f"{f['process_ratio']:.1f}× "
                     f"({fmt_time(f['gloo'])} against {fmt_time(f['proc'])}; "
                     f"{verdict(f['process_ratio'] >= TARGET_PEER_PROCESS_RATIO)})"))
        rows.append(("≥ 10× the gloo peer, check against check", f"{f['check_ratio']:.1f}× "
                     f"({fmt_time(f['check'])} against {fmt_time(f['lib'])}; "
                     f"{verdict(f['check_ratio'] >= TARGET_PEER_CHECK_RATIO)})"))
    out = provenance(res) + "\n| target | result |\n|---|---|\n"
    return out + "".join(f"| {a} | {b} |\n" for a, b in rows)


SCALING_16 = os.path.join(ROOT, "bench", "scaling", "results", "cpu_scaling.md")


def scaling_table(text, source):
    lines = text.rstrip().splitlines()
    if lines and lines[0].startswith("# "):  # the file's own title
        lines = lines[1:]
    return f"_{source}:_\n" + "\n".join(lines).lstrip("\n") + "\n"


def render_scaling(res):
    if not res.scaling:
        return not_run(res, "the thread and process scaling (`bench/scaling/cpu_scaling.sh`)")
    return scaling_table(res.scaling, "`make bench` (`bench/scaling/cpu_scaling.sh`), "
                         "from its `scaling/cpu_scaling.md`")


def render_scaling_16(res):  # the committed run on the 16-core machine, not make bench's
    text = read(SCALING_16)
    if not text:
        return "_Not measured: bench/scaling/results/cpu_scaling.md is missing._\n"
    return scaling_table(text, "`bench/scaling/cpu_scaling.sh`, from bench/scaling/results/cpu_scaling.md")


def render_scale(res):
    tr = res.programs["training_bench"]
    steps = [(label, f, tr.get(name)) for name, label, f in SCALE_STEPS]
    if not all(ok(r) for _, _, r in steps):
        return not_run(res, "`BM_ScaleStep_*` (training_bench)")
    out = provenance(res, "`make bench` (`BM_ScaleStep_*`, training_bench)")
    out += "\n| scenario | wall time | CPU time | peak memory | operations | target (< 60 s, < 8 GiB) |\n"
    out += "|---|---|---|---|---|---|\n"
    for label, f, r in steps:
        ops = r["ops_per_s"] * seconds(r)
        out += (f"| `{f}` ({label}) | {fmt_time(seconds(r))} | {fmt_time(seconds(r, 'cpu_time'))} | "
                f"{r['peak_rss_gib']:.2f} GiB | {ops / 1e3:.0f} k | {verdict(scale_met(r))} |\n")
    return out


RENDERERS = {"results": render_results, "targets": render_targets, "scaling": render_scaling,
             "scaling-16": render_scaling_16, "scale": render_scale}


def render_block(name, res):
    fn = RENDERERS.get(name)
    if fn is None:
        raise SystemExit(f"summarize.py: unknown block bench:{name} (known: {', '.join(RENDERERS)})")
    return fn(res)


def render_text(text, res):
    return BLOCK.sub(lambda m: f"<!-- bench:{m.group(1)} -->\n{render_block(m.group(1), res)}<!-- /bench:{m.group(1)} -->",
                     text)


def files_of(a):
    return [f if os.path.isabs(f) else os.path.join(ROOT, f) for f in (a.files or DEFAULT_FILES)]


def cmd_render(a):
    res = Results(a.results)
    for path in files_of(a):
        with open(path) as f:
            text = f.read()
        new = render_text(text, res)
        if new == text:
            continue
        if a.write:
            with open(path, "w") as f:
                f.write(new)
            print(f"summarize.py: rewrote {os.path.relpath(path, ROOT)}")
        else:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), path,
                                                       path + " (rendered)"))
    return 0


def merge_passes(passes):
    """Google Benchmark's JSON for the runs of several passes: runs by benchmark, in first-seen
    order, numbered as repetitions, then a median aggregate of each benchmark run more than once."""
    order, runs = [], {}
    for doc in passes:
        for r in doc["benchmarks"]:
            if r.get("run_type", "iteration") != "iteration":
                continue
            key = r.get("run_name", r["name"])
            if key not in runs:
                order.append(key)
                runs[key] = []
            runs[key].append(r)
    out = []
    for key in order:
        rs = runs[key]
        for i, r in enumerate(rs):
            out.append(dict(r, repetitions=len(rs), repetition_index=i))
        if len(rs) < 2 or any(r.get("error_occurred") for r in rs):
            continue
        median = dict(rs[0], name=key + "_median", run_type="aggregate", aggregate_name="median",
                      repetitions=len(rs))
        median.pop("repetition_index", None)
        for field, value in rs[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    all(isinstance(r.get(field), (int, float)) for r in rs):
                values = sorted(r[field] for r in rs)
                n = len(values)
                median[field] = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        median["iterations"] = len(rs)
        out.append(median)
    return {"context": dict(passes[0].get("context", {}), passes=len(passes)), "benchmarks": out}


def cmd_merge(a):
    passes = []
    for path in a.passes:
        with open(path) as f:
            passes.append(json.load(f))
    with open(a.output, "w") as f:
        json.dump(merge_passes(passes), f, indent=2)
        f.write("\n")
    return 0


def cmd_check(a):
    res = Results(a.results)
    problems = []
    for path in files_of(a):
        with open(path) as f:
            text = f.read()
        if not BLOCK.search(text):
            problems.append(f"{os.path.relpath(path, ROOT)}: no bench block")
        elif render_text(text, res) != text:
            problems.append(f"{os.path.relpath(path, ROOT)}: a bench block differs from what "
                            f"`bench/summarize.py render --write` makes of {os.path.relpath(a.results, ROOT)}")
    for p in problems:
        print(p)
    return 1 if problems else 0


def main(argv):
    if argv and argv[0] not in ("render", "check", "merge", "-h", "--help"):
        res = Results(argv[0])  # summarize.py RESULTS_DIR: the table run-benchmarks prints
        print()
        if res.machine:
            print(res.machine.rstrip())
        print()
        sys.stdout.write(summary(res))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("render", "check"):
        x = sub.add_parser(name)
        x.add_argument("--results", default=DEFAULT_RESULTS)
        x.add_argument("files", nargs="*")
        if name == "render":
            x.add_argument("--write", action="store_true")
    m = sub.add_parser("merge")
    m.add_argument("output")
    m.add_argument("passes", nargs="+")
    a = p.parse_args(argv)
    return {"render": cmd_render, "check": cmd_check, "merge": cmd_merge}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
