"""The short table `make bench` prints: headline figures from the Google Benchmark JSON files
that bench/run-benchmarks wrote, each against its target, with the fitted growth exponents and
the peer ratio.

    python3 bench/summarize.py RESULTS_DIR
"""
import json
import math
import os
import sys

TARGET_OPS_PER_S = 1e6
TARGET_FIRST_DETECTION_S = 1.0
TARGET_PEER_RATIO = 100.0
TARGET_SCALE_STEP_S = 60.0
TARGET_SCALE_GIB = 8.0


def load(results, program):
    path = os.path.join(results, program + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    def plain(name):  # "BM_X/8/iterations:3/real_time" -> "BM_X/8"
        return "/".join(p for p in name.split("/") if p != "real_time" and not p.startswith("iterations:"))
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


def seconds(run):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[run["time_unit"]]
    return run["real_time"] * scale


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


def row(label, value, target="", status=""):
    print(f"  {label:<58} {value:<20} {target:<12} {status}".rstrip())


def simulator(sim):
    for ranks in (2, 8, 64):
        on, off = sim.get(f"BM_SimOps_DetectorsOn/{ranks}"), sim.get(f"BM_SimOps_DetectorsOff/{ranks}")
        if not (ok(on) and ok(off)):
            row(f"simulator ops/s, {ranks} ranks", "not run")
            continue
        row(f"simulator ops/s, detectors on, {ranks} ranks", fmt_rate(on["ops_per_s"]), ">= 1 M/s",
            verdict(on["ops_per_s"] >= TARGET_OPS_PER_S))
        row(f"simulator ops/s, detectors off, {ranks} ranks", fmt_rate(off["ops_per_s"]))
        row("  throughput with detectors on / off", f"{on['ops_per_s'] / off['ops_per_s']:.2f}")
    for ranks in (2, 8, 64, 256):
        shadow = sim.get(f"BM_SimOps_DetectorsOn_ShadowOnly/{ranks}")
        if ok(shadow):
            row(f"simulator ops/s, detectors on, no values, {ranks} ranks", fmt_rate(shadow["ops_per_s"]),
                ">= 1 M/s", verdict(shadow["ops_per_s"] >= TARGET_OPS_PER_S))


def scale(tr):
    for name, label in (("BM_ScaleStep_Zero3_1024", "ZeRO-3, dp = 1024"),
                        ("BM_ScaleStep_Hsdp_32x32", "HSDP, 32 x 32")):
        run = tr.get(name)
        if not ok(run):
            row(f"training step on 1024 ranks, {label}", "not run")
            continue
        met = seconds(run) < TARGET_SCALE_STEP_S and run["peak_rss_gib"] < TARGET_SCALE_GIB
        row(f"training step on 1024 ranks, {label}, 12 layers",
            f"{fmt_time(seconds(run))}, {run['peak_rss_gib']:.2f} GiB", "< 60 s, 8 GiB", verdict(met))


def training(tr):
    scale(tr)
    step = tr.get("BM_TrainingStep_Zero3")
    if ok(step):
        row("training step: ZeRO-3, 8 ranks, 12 layers, 4 microbatches", fmt_time(seconds(step)))
        row("  its simulated ops/s (every detector and the oracle on)", fmt_rate(step["ops_per_s"]), ">= 1 M/s", verdict(step["ops_per_s"] >= TARGET_OPS_PER_S))
    off = tr.get("BM_TrainingStep_Zero3_DetectorsOff")
    if ok(step) and ok(off):
        row("  the same with the detectors off (the oracle on)", fmt_time(seconds(off)), fmt_rate(off["ops_per_s"]))
        row("  throughput with detectors on / off", f"{step['ops_per_s'] / off['ops_per_s']:.2f}")
    ref = tr.get("BM_Reference_Zero3")
    if ok(ref):
        row("  single-rank reference (once per scenario)", fmt_time(seconds(ref)))
    for axis, fixed in (("Ranks", "12 layers"), ("Layers", "8 ranks")):
        runs = sorted((r for n, r in tr.items() if n.startswith(f"BM_Scaling_{axis}/") and ok(r)),
                      key=lambda r: int(r["plain"].split("/")[1]))
        if len(runs) < 2:
            row(f"scaling with {axis.lower()}", "not run")
            continue
        pts = [(int(r["plain"].split("/")[1]), seconds(r)) for r in runs]
        b_all, b_top = fit_exponent(pts), fit_exponent(pts[-4:])
        span = f"{pts[0][0]}..{pts[-1][0]} {axis.lower()}, {fixed}"
        row(f"scaling with {span}", f"time ~ n^{b_all:.2f}", f"(top 4: n^{b_top:.2f})")
        row("  " + ", ".join(f"{n}: {fmt_time(t)}" for n, t in pts[:4]), "")
        row("  " + ", ".join(f"{n}: {fmt_time(t)}" for n, t in pts[4:]), "")


def catalog(cat):
    explore = [r for n, r in cat.items() if n.startswith("BM_Explore/") and ok(r)]
    if explore:
        schedules = sum(r["schedules"] for r in explore)
        total_s = sum(seconds(r) for r in explore)
        row(f"schedules explored per second, catalog ({len(explore)} files)", f"{schedules / total_s:.1f}/s",
            f"({schedules:.0f} in {fmt_time(total_s)})")
    scaling = sorted((r for n, r in cat.items() if n.startswith("BM_ThreadScaling/") and ok(r)),
                     key=lambda r: int(r["plain"].split("/")[1]))
    if scaling:
        base = scaling[0]["schedules_per_s"]
        row("thread scaling, one exploration (-j N)",
            ", ".join(f"{r['plain'].split('/')[1]}: {r['schedules_per_s']:.1f}/s" for r in scaling),
            "speedup " + ", ".join(f"{r['schedules_per_s'] / base:.2f}x" for r in scaling))
    first = sorted((r for n, r in cat.items() if n.startswith("BM_FirstDetection/")), key=lambda r: r["plain"])
    if not first:
        return
    found = [r for r in first if ok(r)]
    worst = max((seconds(r) for r in found), default=float("inf"))
    met = len(found) == len(first) and worst < TARGET_FIRST_DETECTION_S
    row(f"first detection, each catalog bug ({len(found)}/{len(first)} found)", f"slowest {fmt_time(worst)}", "< 1 s each",
        verdict(met))
    for r in first:
        name = r["plain"].split("/", 1)[1]
        if ok(r):
            row(f"  {name}", fmt_time(seconds(r)), f"schedule {r['schedules']:.0f}", r.get("label", ""))
        else:
            row(f"  {name}", "NOT FOUND", "", r.get("error_message", ""))


def peer(pb):
    lib, proc, gloo = pb.get("BM_Compare_Shardcheck"), pb.get("BM_Compare_ShardcheckProcess"), pb.get("BM_Peer_GlooEquivalence")
    if not (ok(lib) and ok(proc) and ok(gloo)):
        why = gloo.get("error_message", "") if gloo else "not run"
        row("peer comparison", "not run", "", why)
        return
    row("shardcheck compare ZeRO-1 vs DistOpt, in process", fmt_time(seconds(lib)))
    row("shardcheck compare ZeRO-1 vs DistOpt, as a process", fmt_time(seconds(proc)))
    row("gloo peer, 4 processes: the check itself", fmt_time(gloo["check_s"]))
    row("gloo peer, 4 processes: as a process", fmt_time(seconds(gloo)))
    check_ratio, process_ratio = gloo["check_s"] / seconds(lib), seconds(gloo) / seconds(proc)
    row("  faster than the peer, check against check", f"{check_ratio:.1f}x", ">= 100x", verdict(check_ratio >= TARGET_PEER_RATIO))
    row("  faster than the peer, process against process", f"{process_ratio:.1f}x", ">= 100x", verdict(process_ratio >= TARGET_PEER_RATIO))


def main():
    results = sys.argv[1]
    print()
    machine = os.path.join(results, "machine.txt")
    if os.path.exists(machine):
        with open(machine) as f:
            print(f.read().rstrip())
    print()
    row("figure", "value", "target", "")
    simulator(load(results, "sim_bench"))
    training(load(results, "training_bench"))
    catalog(load(results, "catalog_bench"))
    peer(load(results, "peer_bench"))


if __name__ == "__main__":
    main()
