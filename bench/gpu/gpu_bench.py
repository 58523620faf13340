#!/usr/bin/env python3
"""The GPU figures of README.md and bench/gpu/README.md, measured and rendered by one program.

    gpu_bench.py run --build build --out DIR [--runs 3] [--parts measure,agreement,multi,torch]
                     [--machine NAME]
        On a GPU machine: runs gpu_measure, gpu_multi (2+ GPUs) and bench/peer/tinylm_torch.py,
        each timed part --runs times, and writes DIR/gpu-bench.json: the machine, the date,
        the command, the GPU, the driver, the torch version, the commit, and every run's output.
    gpu_bench.py merge [--machine NAME] OUT.json A.json B.json...
        One file from runs of different parts (later files win for a part they both hold; the
        first file's machine, date and commit stay, unless --machine names the machine).
    gpu_bench.py render [--json FILE] [--write] [FILES...]
        Regenerates every block between <!-- gpu-bench:NAME --> and <!-- /gpu-bench:NAME --> in
        FILES (default: README.md and bench/gpu/README.md) from FILE (default: the committed
        bench/gpu/results/gpu-bench.json; without it, each block says nothing was measured).
        Prints the rendered files' differences, or with --write rewrites them.
    gpu_bench.py check [--json FILE]
        Exit 1 when a block differs from what render makes of FILE, or when a GPU figure
        (ms/step, TFLOP/s, GB/s, MFU, a table) stands outside a block: a figure typed by hand.
    gpu_bench.py show --json FILE NAME
        Prints one rendered block.

Every headline figure is the median of the runs with their minimum and maximum; MFU is the
model FLOPs of a step (6 per token per matrix parameter) over the step time, against the dense
bf16 GEMM rate measured on the same card in the same command. Python standard library only.
"""
import argparse
import datetime
import difflib
import json
import os
import re
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_JSON = os.path.join(ROOT, "bench", "gpu", "results", "gpu-bench.json")
DEFAULT_FILES = [os.path.join("docs", "gpu.md"), os.path.join("bench", "gpu", "README.md")]
SCHEMA = "shardcheck-gpu-bench/1"
PARTS = ["measure", "agreement", "multi", "torch"]
TORCH_MODES = [  # (name, tinylm_torch.py options, what it is)
    ("microbatches_eager", [], "PyTorch eager, 4 microbatches of 2 (the same step as ours)"),
    ("microbatches_compile", ["--compile"], "PyTorch torch.compile, 4 microbatches of 2"),
    ("one_batch_eager", ["--one-batch"], "PyTorch eager, one batch of 8, bf16 autocast, fused AdamW"),
    ("one_batch_compile", ["--one-batch", "--compile"],
     "PyTorch torch.compile, one batch of 8, bf16 autocast, fused AdamW"),
]
BLOCK = re.compile(r"<!-- gpu-bench:([a-z0-9-]+) -->\n(.*?)<!-- /gpu-bench:\1 -->", re.S)


# ---- run: on the GPU machine.

def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit_facts():
    """The commit measured. GPU_BENCH_COMMIT names it (and says the tree is that commit's) where
    the working tree was copied to the GPU machine without the history that matches it."""
    named = os.environ.get("GPU_BENCH_COMMIT")
    if named:
        return {"commit": named[:12], "dirty": False}
    return {"commit": sh(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"]) or None,
            "dirty": bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]))}


def machine_facts(python):
    smi = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    gpus = [dict(zip(["name", "driver", "memory"], [f.strip() for f in line.split(",")]))
            for line in smi.splitlines() if line.strip()]
    torch = sh([python, "-c", "import torch; print(torch.__version__)"]) or None
    return {
        "machine": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": {"name": gpus[0]["name"] if gpus else None, "count": len(gpus),
                "driver": gpus[0]["driver"] if gpus else None, "memory": gpus[0]["memory"] if gpus else None},
        "torch": torch,
        **commit_facts(),
        "nvcc": (sh(["/usr/local/cuda/bin/nvcc", "--version"]).splitlines() or [None])[-1],
    }


OUT_DIR = None  # the run's --out, shown as OUT in the recorded command lines


def shown(arg):
    if OUT_DIR and arg.startswith(OUT_DIR):
        return "OUT" + arg[len(OUT_DIR):]
    if os.path.isabs(arg) and arg.startswith(ROOT + os.sep):
        return os.path.relpath(arg, ROOT)
    return arg


TIMEOUT_S = None  # --timeout-s: the longest one program may run


def run_one(argv, log, result_file, env=None):
    """Runs argv with its output in log; returns (the JSON it wrote or None, a record)."""
    start = datetime.datetime.now(datetime.timezone.utc)
    with open(log, "w") as f:
        try:
            rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    seconds = (datetime.datetime.now(datetime.timezone.utc) - start).total_seconds()
    record = {"argv": [shown(a) for a in argv],
              "rc": rc, "seconds": round(seconds, 1), "log": os.path.basename(log)}
    try:
        with open(result_file) as f:
            return json.load(f), record
    except (OSError, ValueError):
        record["error"] = "no result file"
        return None, record


def cmd_run(a):
    global OUT_DIR, TIMEOUT_S
    OUT_DIR = a.out
    TIMEOUT_S = a.timeout_s
    os.makedirs(a.out, exist_ok=True)
    parts = [p for p in a.parts.split(",") if p]
    facts = machine_facts(a.python)
    if a.machine:
        facts["machine"] = a.machine
    doc = {"schema": SCHEMA, "sample": False, "command": a.command, **facts, "runs_per_figure": a.runs,
           "parts": {}}
    measure = os.path.join(a.build, "bench", "gpu", "gpu_measure")
    multi = os.path.join(a.build, "bench", "gpu", "gpu_multi")

    def save():
        with open(os.path.join(a.out, "gpu-bench.json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")

    if "measure" in parts:
        runs = []
        for i in range(1, a.runs + 1):
            d = os.path.join(a.out, f"measure-{i}")
            print(f"gpu-bench: gpu_measure one_rank,steps, run {i} of {a.runs}", flush=True)
            j, rec = run_one([measure, "--sections", "one_rank,steps", "--out", d], d + ".log",
                             os.path.join(d, "gpu_measure.json"))
            runs.append({**rec, "result": j})
            doc["parts"]["measure"] = runs
            save()
    if "agreement" in parts:
        d = os.path.join(a.out, "agreement")
        print("gpu-bench: gpu_measure agreement (once: its figures are deterministic)", flush=True)
        j, rec = run_one([measure, "--sections", "agreement", "--out", d], d + ".log",
                         os.path.join(d, "gpu_measure.json"))
        doc["parts"]["agreement"] = {**rec, "result": j}
        save()
    if "multi" in parts:
        if facts["gpu"]["count"] < 2:
            doc["parts"]["multi"] = {"skipped": f"gpu_multi needs 2 or more GPUs; this machine has "
                                                f"{facts['gpu']['count']}"}
        else:
            env = dict(os.environ)
            env.setdefault("NCCL_NVLS_ENABLE", "0")
            runs = []
            for i in range(1, a.runs + 1):
                d = os.path.join(a.out, f"multi-{i}")
                print(f"gpu-bench: gpu_multi steps, run {i} of {a.runs}", flush=True)
                j, rec = run_one([multi, "--sections", "steps", "--out", d], d + ".log",
                                 os.path.join(d, "gpu_multi.json"), env)
                runs.append({**rec, "result": j})
            d = os.path.join(a.out, "multi-losses")
            print("gpu-bench: gpu_multi losses (once)", flush=True)
            j, rec = run_one([multi, "--sections", "losses", "--steps", "100", "--out", d], d + ".log",
                             os.path.join(d, "gpu_multi.json"), env)
            doc["parts"]["multi"] = {"steps": runs, "losses": {**rec, "result": j},
                                     "NCCL_NVLS_ENABLE": env["NCCL_NVLS_ENABLE"]}
        save()
    if "torch" in parts:
        peer = os.path.join(ROOT, "bench", "peer", "tinylm_torch.py")
        modes = {}
        for name, opts, _ in TORCH_MODES:
            runs = []
            for i in range(1, a.runs + 1):
                f = os.path.join(a.out, f"torch-{name}-{i}.json")
                print(f"gpu-bench: tinylm_torch.py {' '.join(opts) or '(eager)'}, run {i} of {a.runs}", flush=True)
                j, rec = run_one([a.python, peer, *opts, "--out", f], f[:-5] + ".log", f)
                runs.append({**rec, "result": j})
            modes[name] = runs
            doc["parts"]["torch"] = modes
            save()
    save()
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    failed = [r for r in iter_records(doc) if r.get("rc") not in (0, None) or r.get("error")]
    print(f"gpu-bench: wrote {os.path.join(a.out, 'gpu-bench.json')}; {len(failed)} failed program runs")
    return 1 if failed else 0


def iter_records(doc):
    for p in doc.get("parts", {}).values():
        stack = [p]
        while stack:
            x = stack.pop()
            if isinstance(x, list):
                stack.extend(x)
            elif isinstance(x, dict):
                if "argv" in x:
                    yield x
                else:
                    stack.extend(v for k, v in x.items() if isinstance(v, (dict, list)))


def cmd_merge(a):
    out = None
    for path in a.inputs:
        with open(path) as f:
            d = json.load(f)
        if out is None:
            out = d
        else:
            out["parts"].update(d.get("parts", {}))
    if a.machine:
        out["machine"] = a.machine
    with open(a.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


# ---- render: anywhere, from the JSON.

def spread(values, fmt):
    """median [min, max] of the runs, or the one value."""
    v = [x for x in values if x is not None]
    if not v:
        return "(no run)"
    if len(v) == 1:
        return fmt.format(v[0]) + " (1 run)"
    return f"{fmt.format(statistics.median(v))} [{fmt.format(min(v))}, {fmt.format(max(v))}]"


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def pct(x):
    return "—" if x is None else f"{100 * x:.1f} %"


def results(runs):
    return [r["result"] for r in runs if r.get("result")]


def caption(doc, what, argv_list=None):
    gpu = doc.get("gpu", {})
    sample = "**SAMPLE DATA, NOT A MEASUREMENT** (tests only). " if doc.get("sample") else ""
    cmds = ""
    if argv_list:
        cmds = "; ".join(f"`{' '.join(x for x in a if not x.startswith('(×'))}`"
                         + (f" {a[-1][1:-1]}" if a[-1].startswith("(×") else "") for a in argv_list)
        cmds = f" ({cmds})"
    return (f"_{sample}{what}: `{doc.get('command')}`{cmds} on {doc.get('machine')}, {doc.get('date')}; "
            f"{gpu.get('count')}× {gpu.get('name')}, driver {gpu.get('driver')}, torch {doc.get('torch')}, "
            f"commit {doc.get('commit')}{' (with local changes)' if doc.get('dirty') else ''}._\n\n")


def argv_of(runs):
    """The distinct command lines of runs, without their --out (each run has its own), with how
    many times each ran."""
    seen, counts = [], {}
    for r in runs:
        a = list(r.get("argv") or [])
        if "--out" in a and a.index("--out") + 1 < len(a):
            del a[a.index("--out"):a.index("--out") + 2]
        key = tuple(a)
        if key and key not in counts:
            seen.append(key)
        counts[key] = counts.get(key, 0) + 1
    return [list(k) + ([f"(×{counts[k]})"] if counts[k] > 1 else []) for k in seen]


def table(header, rows):
    out = "| " + " | ".join(header) + " |\n| " + " | ".join("---" for _ in header) + " |\n"
    for r in rows:
        out += "| " + " | ".join(r) + " |\n"
    return out


def not_measured(name):
    return ("_Not measured yet: no `bench/gpu/results/gpu-bench.json` is committed. Run `make gpu-bench` "
            "on a GPU machine (`scripts/gpu-verify DIR` builds, tests and measures in one command)._\n")


def missing(doc, part):
    p = doc.get("parts", {}).get(part)
    if p is None:
        return f"_Not in this run: part `{part}` was not run._\n"
    if isinstance(p, dict) and p.get("skipped"):
        return f"_Not in this run: {p['skipped']}._\n"
    return None


def peak_tflops(doc):
    return med([m.get("bf16_gemm_8192_tflops") for m in results(doc["parts"].get("measure", []))])


def torch_rows(doc, peak, ours_ms):
    rows = []
    for name, _, what in TORCH_MODES:
        runs = doc["parts"].get("torch", {}).get(name, [])
        res = results(runs)
        if not res:
            rows.append([what, f"(every run failed: exit {runs[0].get('rc')})" if runs else "(not run)", "—", "—"])
            continue
        meds = [r["ms_per_step_median"] for r in res]
        flops = res[0]["model_flops_per_step"]
        mfu = flops / (med(meds) * 1e-3) / (peak * 1e12) if peak else None
        ratio = f"{ours_ms / med(meds):.2f}×" if ours_ms else "—"
        rows.append([what, spread(meds, "{:.2f}"), pct(mfu), ratio])
    return rows


def render_summary(doc):
    if missing(doc, "measure"):
        return missing(doc, "measure")
    m = results(doc["parts"]["measure"])
    ours = [x["one_rank"]["ms_per_step"] for x in m if "one_rank" in x]
    peak = peak_tflops(doc)
    rows = [["shardcheck CUDA backend, TinyLM one rank (no_shard)", spread(ours, "{:.2f}"),
             pct(med([x["one_rank"]["mfu"] for x in m if "one_rank" in x])), "1.00×"]]
    if not missing(doc, "torch"):
        rows += torch_rows(doc, peak, med(ours))
    return (caption(doc, "median [min, max] of the runs' step times", argv_of(doc["parts"]["measure"]))
            + table(["TinyLM step (vocab 8192, hidden 1024, 8 layers, seq 1024, 8 sequences)", "ms/step",
                     "MFU", "our step ÷ this"], rows))


def render_one_gpu(doc):
    if missing(doc, "measure"):
        return missing(doc, "measure")
    m = results(doc["parts"]["measure"])
    one = [x["one_rank"] for x in m if "one_rank" in x]
    rows = [
        ["dense bf16 GEMM 8192³ (cuBLASLt), TFLOP/s", spread([x.get("bf16_gemm_8192_tflops") for x in m], "{:.1f}")],
        ["device-to-device copy, GB/s", spread([x.get("copy_gbs") for x in m], "{:.0f}")],
        ["TinyLM one rank, no_shard, ms/step", spread([o["ms_per_step"] for o in one], "{:.2f}")],
        ["MFU (against the GEMM rate above)", spread([100 * o["mfu"] for o in one], "{:.1f} %")],
        ["GEMMs inside the step, TFLOP/s", spread([o["gemm_tflops_inside_step"] for o in one], "{:.0f}")],
        ["the same GEMM shapes alone, TFLOP/s", spread([o["gemm_tflops_same_shapes_alone"] for o in one], "{:.0f}")],
        ["GEMM share of the step", spread([100 * o["gemm_share_of_step"] for o in one], "{:.1f} %")],
        ["kernel device time per step (profiled run), ms", spread([o["kernel_device_ms_per_step"] for o in one], "{:.2f}")],
    ]
    return (caption(doc, "median [min, max] of the runs", argv_of(doc["parts"]["measure"]))
            + table(["figure", "value"], rows))


def render_torch(doc):
    for part in ("measure", "torch"):
        if missing(doc, part):
            return missing(doc, part)
    m = results(doc["parts"]["measure"])
    ours = med([x["one_rank"]["ms_per_step"] for x in m if "one_rank" in x])
    argv = [a for runs in doc["parts"]["torch"].values() for a in argv_of(runs)]
    return (caption(doc, "median [min, max] of each run's median of 9 steps after 3 warm-ups", argv)
            + table(["PyTorch peer (same model, same GPU)", "ms/step", "MFU", "our step ÷ this"],
                    torch_rows(doc, peak_tflops(doc), ours)))


def render_kernels(doc):
    if missing(doc, "measure"):
        return missing(doc, "measure")
    per = {}
    order = []
    for x in results(doc["parts"]["measure"]):
        for k in x.get("one_rank", {}).get("kernels", []):
            if k["name"] not in per:
                order.append(k["name"])
            per.setdefault(k["name"], []).append(k)
    names = sorted(order, key=lambda n: (-med([k["device_ms_per_step"] for k in per[n]]), n))
    rows = [[f"`{n}`", f"{med([k['launches_per_step'] for k in per[n]]):.0f}",
             spread([k["device_ms_per_step"] for k in per[n]], "{:.3f}"),
             spread([k["host_ms_per_step"] for k in per[n]], "{:.3f}")] for n in names[:12]]
    more = f"\n{len(names) - 12} more kernels in the JSON.\n" if len(names) > 12 else ""
    return (caption(doc, "the profiled one-rank step (every launch bracketed by CUDA events), median [min, max]",
                    argv_of(doc["parts"]["measure"]))
            + table(["kernel", "launches", "device ms", "host ms"], rows) + more)


def render_strategies_local(doc):
    if missing(doc, "measure"):
        return missing(doc, "measure")
    per = {}
    for x in results(doc["parts"]["measure"]):
        for s in x.get("step_time", []):
            per.setdefault(s["strategy"], []).append(s)
    dist = med([s["ms_per_step"] for s in per.get("distopt", [])])
    rows = []
    for name, ss in per.items():
        ms = [s["ms_per_step"] for s in ss]
        ov = [s["ms_per_step_overlap"] for s in ss if "ms_per_step_overlap" in s]
        rows.append([name, spread(ms, "{:.1f}"), f"{med(ms) / dist:.3f}" if dist else "—",
                     pct(med([s["mfu"] for s in ss])), spread(ov, "{:.1f}") if ov else "not measured"])
    return (caption(doc, "4 ranks on the device-local communicator (one GPU), median [min, max] of the runs",
                    argv_of(doc["parts"]["measure"]))
            + table(["strategy", "ms/step", "vs DistOpt", "MFU", "with overlap: ms/step"], rows))


def render_agreement(doc):
    if missing(doc, "agreement"):
        return missing(doc, "agreement")
    p = doc["parts"]["agreement"]
    r = p.get("result") or {}
    by = {}
    for a in r.get("against_distopt", []):
        by.setdefault(a["strategy"], {})["exact" if a["exact"] else "bf16"] = a
    fmt = lambda a: "—" if a is None else f"{a['max_abs_delta_loss']:.3g} ({a['steps']} steps)"
    rows = [[s, fmt(v.get("bf16")), fmt(v.get("exact"))] for s, v in by.items()]
    sim = r.get("against_simulator_fp32")
    tail = (f"\nGPU against the simulator, {sim['strategy']} fp32, {sim['steps']} steps: max |Δloss| "
            f"{sim['max_abs_delta_loss']:.3g}.\n") if sim else ""
    return (caption(doc, "one run (deterministic)", argv_of([p]))
            + table(["strategy", "bf16 max \\|Δloss\\| vs DistOpt", "exact max \\|Δloss\\| vs DistOpt"], rows)
            + tail)


def render_multi_steps(doc):
    if missing(doc, "multi"):
        return missing(doc, "multi")
    runs = doc["parts"]["multi"]["steps"]
    per = {}
    for x in results(runs):
        for s in x.get("step_time", []):
            per.setdefault(s["strategy"], []).append(s)
    dist = med([s["ms_per_step"] for s in per.get("distopt", [])])
    rows = []
    for name, ss in per.items():
        ms = [s["ms_per_step"] for s in ss]
        rows.append([name, spread(ms, "{:.2f}"), f"{med(ms) / dist:.3f}" if dist else "—",
                     spread([s["ms_without_communication"] for s in ss], "{:.2f}"),
                     f"{med([s['ms_communication_alone'] for s in ss]):.2f}",
                     f"{med([s['ms_exposed'] for s in ss]):.2f}",
                     spread([100 * s["overlap"] for s in ss], "{:.0f} %"),
                     spread([s["ms_per_step_no_overlap"] for s in ss], "{:.2f}")
                     if all("ms_per_step_no_overlap" in s for s in ss) else "not measured"])
    n = med([s["ranks"] for ss in per.values() for s in ss])
    return (caption(doc, f"{n:.0f} ranks over NCCL, one per GPU, communication overlapped; median [min, max] "
                    "of the runs' medians", argv_of(runs))
            + table(["strategy", "ms/step", "vs DistOpt", "without comm.", "comm. alone", "exposed", "overlapped",
                     "without overlap"], rows))


def render_multi_busbw(doc):
    if missing(doc, "multi"):
        return missing(doc, "multi")
    runs = doc["parts"]["multi"]["steps"]
    per, order = {}, []
    for x in results(runs):
        for b in x.get("bus_bandwidth", []):
            key = (b["strategy"], b["kind"], b["dtype"], b["group"], b["bytes"])
            if key not in per:
                order.append(key)
            per.setdefault(key, []).append(b)
    rows = []
    for key in order:
        bs = per[key]
        if key[4] < (1 << 20) or bs[0]["members"] < 2:
            continue
        rows.append([key[0], f"{key[1]} {key[2]} ({key[3]})", f"{key[4]:,.0f}", str(bs[0]["per_step"]),
                     spread([1e6 * b["seconds"] for b in bs], "{:.1f}"), spread([b["busbw_gbs"] for b in bs], "{:.1f}")])
    return (caption(doc, "each collective size a step issues, timed alone (mean of 20 after 5 warm-ups, slowest "
                         "GPU); sizes of 1 MiB and more; median [min, max] of the runs", argv_of(runs))
            + table(["strategy", "collective", "bytes", "per step", "µs", "busbw GB/s"], rows))


def render_multi_losses(doc):
    if missing(doc, "multi"):
        return missing(doc, "multi")
    p = doc["parts"]["multi"]["losses"]
    r = p.get("result") or {}
    rows = [[x["mode"], x["strategy"], "yes" if x["step0_bitwise_equal"] else "NO",
             f"{x['max_abs_nccl_vs_local']:.3g}", f"{x['max_abs_local_vs_reversed_order']:.3g}",
             f"{x['tolerance']:.3g}", f"{x['max_abs_nccl_vs_sim']:.3g}", "yes" if x["within"] else "NO"]
            for x in r.get("losses", [])]
    return (caption(doc, "one run (deterministic)", argv_of([p]))
            + table(["mode", "strategy", "step 0 equal", "NCCL − local", "order only", "tolerance",
                     "NCCL − simulator", "within"], rows))


RENDERERS = {
    "summary": render_summary,
    "one-gpu": render_one_gpu,
    "torch": render_torch,
    "kernels": render_kernels,
    "strategies-local": render_strategies_local,
    "agreement": render_agreement,
    "multi-steps": render_multi_steps,
    "multi-busbw": render_multi_busbw,
    "multi-losses": render_multi_losses,
}


def render_block(name, doc):
    if name not in RENDERERS:
        raise SystemExit(f"gpu_bench: unknown block '{name}' (known: {', '.join(RENDERERS)})")
    if doc is None:
        return not_measured(name)
    if doc.get("schema") != SCHEMA:
        raise SystemExit(f"gpu_bench: the JSON's schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    return RENDERERS[name](doc)


def render_text(text, doc):
    return BLOCK.sub(lambda m: f"<!-- gpu-bench:{m.group(1)} -->\n{render_block(m.group(1), doc)}"
                               f"<!-- /gpu-bench:{m.group(1)} -->", text)


def load_doc(path):
    if path is None:
        path = DEFAULT_JSON if os.path.exists(DEFAULT_JSON) else None
    if path is None:
        return None
    with open(path) as f:
        return json.load(f)


def files_of(a):
    return [f if os.path.isabs(f) else os.path.join(ROOT, f) for f in (a.files or DEFAULT_FILES)]


def cmd_render(a):
    doc = load_doc(a.json)
    changed = 0
    for path in files_of(a):
        with open(path) as f:
            text = f.read()
        new = render_text(text, doc)
        if new != text:
            changed += 1
            if a.write:
                with open(path, "w") as f:
                    f.write(new)
                print(f"gpu_bench: rewrote {os.path.relpath(path, ROOT)}")
            else:
                sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                           path, path + " (rendered)"))
    return 0


# A GPU figure outside a block: a number with a GPU unit, or a Markdown table in the GPU README.
FIGURE = re.compile(r"\d[\d.,]*\s*(ms/step|TFLOP/s|GB/s)|MFU\s*[:=]?\s*\d|\d[\d.]*\s*%\s*MFU|\d(\.\d+)?×\s*slower")


def stale_lines(path, tables_too):
    with open(path) as f:
        text = f.read()
    outside = BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found = []
    for i, line in enumerate(outside.splitlines(), 1):
        if FIGURE.search(line) or (tables_too and line.lstrip().startswith("|")):
            found.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()[:100]}")
    return found


def cmd_check(a):
    doc = load_doc(a.json)
    problems = []
    for path in files_of(a):
        with open(path) as f:
            text = f.read()
        names = BLOCK.findall(text)
        if not names:
            problems.append(f"{os.path.relpath(path, ROOT)}: no gpu-bench block")
        if render_text(text, doc) != text:
            problems.append(f"{os.path.relpath(path, ROOT)}: a gpu-bench block differs from what "
                            f"`bench/gpu/gpu_bench.py render --write` makes of the JSON")
        problems += [f"{p}: a GPU figure outside the gpu-bench blocks (typed by hand?)"
                     for p in stale_lines(path, tables_too=path.endswith(os.path.join("gpu", "README.md")))]
    for p in problems:
        print(p)
    return 1 if problems else 0


def cmd_show(a):
    sys.stdout.write(render_block(a.name, load_doc(a.json)))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--out", required=True)
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--parts", default=",".join(PARTS))
    r.add_argument("--python", default="python3")
    r.add_argument("--timeout-s", type=float, help="stop a program that runs longer (its run is then recorded as failed)")
    r.add_argument("--json", help="also write the result here (e.g. bench/gpu/results/gpu-bench.json)")
    r.add_argument("--command", default=os.environ.get("GPU_BENCH_COMMAND", "bench/gpu/gpu_bench.py run"))
    machine_help = "how the tables name the machine (default: its host name, which a VM may not make telling)"
    r.add_argument("--machine", default=os.environ.get("GPU_BENCH_MACHINE"), help=machine_help)
    m = sub.add_parser("merge")
    m.add_argument("--machine", help=machine_help)
    m.add_argument("output")
    m.add_argument("inputs", nargs="+")
    for name in ("render", "check"):
        x = sub.add_parser(name)
        x.add_argument("--json")
        x.add_argument("files", nargs="*")
        if name == "render":
            x.add_argument("--write", action="store_true")
    s = sub.add_parser("show")
    s.add_argument("--json")
    s.add_argument("name")
    a = p.parse_args()
    if a.cmd == "run":
        a.build = os.path.abspath(a.build)
        a.out = os.path.abspath(a.out)
    return {"run": cmd_run, "merge": cmd_merge, "render": cmd_render, "check": cmd_check, "show": cmd_show}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
