"""python3 -m shardcheck.capture [--nproc-per-node N] --out DIR [--device cuda|cpu]
                                 [--timeout S] [--check] [--no-capture] [--no-values]
                                 -- script.py ARGS...

Runs script.py as __main__ (as `python3 script.py ARGS...` would) inside a capture, then
prints where the files are and the command that checks them. With --check (one process, the
whole world) it then runs that command too, and exits with its code: capture and check in
one command.

With --nproc-per-node N it is the launcher: it starts N ranks with torchrun's environment
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), each captured; when one rank
ends badly (it raises, crashes, or hangs past --timeout inside a collective) the others are
stopped with SIGTERM, so every rank's file ends whole and marked partial; SIGINT or SIGTERM to
the launcher reaches every rank the same way. Then, with --check, `shardcheck run DIR`.
"""

import argparse
import os
import runpy
import shutil
import subprocess
import sys

from . import DEFAULT_TIMEOUT, Capture


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python3 -m shardcheck.capture",
                                description="Capture a PyTorch program for `shardcheck run DIR`.",
                                usage="%(prog)s --out DIR [--device cuda|cpu] [--] script.py ARGS")
    p.add_argument("--out", help="folder for rank-<R>.jsonl (required unless --no-capture)")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="which tensors to follow (default: cuda when available)")
    p.add_argument("--check", action="store_true",
                   help="then run `shardcheck run DIR` and exit with its code")
    p.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                   help="start N ranks on this machine, as torchrun --nproc-per-node N does")
    p.add_argument("--no-capture", action="store_true",
                   help="run the program without recording it (with --nproc-per-node and more "
                        "ranks than GPUs, still on the one-GPU backend): the baseline a "
                        "capture's cost is measured against")
    p.add_argument("--no-values", action="store_true",
                   help="record no value digests (of collective inputs, and of parameters and "
                        "gradients at each optimizer step): no replica_divergence or "
                        "double_reduction findings, and none of their cost")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="a rank inside one collective for longer than S seconds is hung: its "
                        "file ends marked partial (default %d, NCCL's own)" % DEFAULT_TIMEOUT)
    if "--" in argv:
        i = argv.index("--")
        args, target = p.parse_args(argv[:i]), argv[i + 1:]
    else:  # launchers such as torchrun may drop the "--"
        p.add_argument("program", nargs=argparse.REMAINDER, help="script.py ARGS")
        args = p.parse_args(argv)
        target = args.program
    if not target:
        p.error("give the program after --, e.g. -- train.py --steps 2")
    script = target[0]
    if not os.path.isfile(script):
        p.error("%s: no such file" % script)
    if args.timeout is not None and not args.timeout > 0:
        p.error("--timeout must be a positive number of seconds")
    if args.out is None and not args.no_capture:
        p.error("give --out DIR (the folder for the rank files)")
    if args.no_capture and args.check:
        p.error("--check needs a capture: drop --no-capture")
    missing = _missing_torch()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if args.no_values:
        os.environ["SHARDCHECK_CAPTURE_VALUES"] = "0"  # the ranks inherit it
    if args.nproc_per_node is not None:
        if not 1 <= args.nproc_per_node <= 64:
            p.error("--nproc-per-node must be between 1 and 64 (the checker's bound on ranks)")
        from .launch import launch
        return launch(args, target)
    if args.timeout is not None:
        os.environ["SHARDCHECK_CAPTURE_TIMEOUT"] = str(args.timeout)
    sys.argv = target
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    if args.no_capture:
        return _run_uncaptured(script)
    cap = Capture(args.out, device=args.device, argv=target)
    failed = None
    try:
        with cap:
            try:
                runpy.run_path(script, run_name="__main__")
            except Exception as e:  # noqa: BLE001 (a started rank's failure, reported below)
                if not cap.handed_over:
                    raise  # this rank's own: its file ends partial with it
                failed = e
    except SystemExit as e:  # sys.exit(...) once the program's started ranks have ended
        if not cap.handed_over:
            raise
        if e.code not in (None, 0):
            failed = e
    if os.environ.get("SHARDCHECK_LAUNCHED"):
        return 0  # the launcher reports for every rank
    if cap.handed_over:
        return _report_started(cap, args, failed)
    st = cap.recorder.stats
    print("shardcheck.capture: %s: %d records (%d ops, %d allocations, %d frees, %d collectives)"
          % (cap.path, cap.recorder._w.records, st["ops"], st["allocs"], st["frees"],
             st["collectives"]), file=sys.stderr)
    if not args.check:
        print("shardcheck.capture: check it with: shardcheck run %s" % args.out, file=sys.stderr)
        return 0
    from . import rank_and_world
    if rank_and_world()[1] != 1:
        print("shardcheck.capture: --check runs with one process; with several, check the "
              "folder once every rank has finished: shardcheck run %s" % args.out,
              file=sys.stderr)
        return 0
    return check(args.out)


def _report_started(cap, args, failed):
    """The program started its own ranks (spawned.py): their files are the capture, whole
    however each ended; checked with --check even when the program failed."""
    from .launch import plural
    if isinstance(failed, SystemExit):
        print("shardcheck.capture: the program exited with status %s" % failed.code,
              file=sys.stderr)
    elif failed is not None:
        why = " ".join(str(failed).split())[:300]
        print("shardcheck.capture: the program's ranks failed (%s: %s)"
              % (type(failed).__name__, why), file=sys.stderr)
    files = [f for f in os.listdir(args.out) if f.startswith("rank-") and f.endswith(".jsonl")]
    print("shardcheck.capture: %s: %s, started by the program%s"
          % (args.out, plural(len(files), "rank file"),
             "" if failed is None else ", partial"), file=sys.stderr)
    if not args.check:
        print("shardcheck.capture: check it with: shardcheck run %s" % args.out,
              file=sys.stderr)
        return 0 if failed is None else 1
    code = check(args.out)
    return code if code != 0 or failed is None else 1


def _missing_torch():
    """Why the capture cannot run here ("" when it can): it follows a PyTorch program, so the
    Python running it needs torch."""
    try:
        import torch  # noqa: F401
    except ImportError as error:
        return ("python3 -m shardcheck.capture: this Python (%s) cannot import torch (%s). The "
                "capture runs your program under the Python that has PyTorch: install it there, "
                "or start the capture with that interpreter (e.g. /usr/bin/python3 -m "
                "shardcheck.capture ...)." % (sys.executable, error))
    return ""


def _run_uncaptured(script):
    """The program as the capture would run it, on the one-GPU backend where the capture would
    put it, with nothing recorded."""
    import torch

    from . import _one_gpu_wanted
    if _one_gpu_wanted(torch):
        from . import onegpu
        onegpu.install()
    runpy.run_path(script, run_name="__main__")
    return 0


def check(out):
    """`shardcheck run OUT`, with its exit code; 2 when no checker is found."""
    binary = checker()
    if binary is None:
        print("shardcheck.capture: --check: no shardcheck binary (set SHARDCHECK_BIN, put it on "
              "PATH, or build it with `make`)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return subprocess.call([binary, "run", out])


def checker():
    """The shardcheck binary: $SHARDCHECK_BIN, then PATH, then this checkout's build."""
    env = os.environ.get("SHARDCHECK_BIN")
    if env:
        return env
    found = shutil.which("shardcheck")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "..", "build", "cli", "shardcheck")
    return os.path.normpath(built) if os.path.isfile(built) else None


if __name__ == "__main__":
    sys.exit(main())
