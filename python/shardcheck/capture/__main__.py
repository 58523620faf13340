"""python3 -m shardcheck.capture --out DIR [--device cuda|cpu] [--check] -- script.py ARGS...

Runs script.py as __main__ (as `python3 script.py ARGS...` would) inside a capture, then
prints where the files are and the command that checks them. With --check (one process, the
whole world) it then runs that command too, and exits with its code: capture and check in
one command.
"""

import argparse
import os
import runpy
import shutil
import subprocess
import sys

from . import Capture


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python3 -m shardcheck.capture",
                                description="Capture a PyTorch program for `shardcheck run DIR`.",
                                usage="%(prog)s --out DIR [--device cuda|cpu] [--] script.py ARGS")
    p.add_argument("--out", required=True, help="folder for rank-<R>.jsonl")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="which tensors to follow (default: cuda when available)")
    p.add_argument("--check", action="store_true",
                   help="then run `shardcheck run DIR` (one process only) and exit with its code")
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
    sys.argv = target
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    cap = Capture(args.out, device=args.device, argv=target)
    with cap:
        runpy.run_path(script, run_name="__main__")
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
    binary = checker()
    if binary is None:
        print("shardcheck.capture: --check: no shardcheck binary (set SHARDCHECK_BIN, put it on "
              "PATH, or build it with `make`)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return subprocess.call([binary, "run", args.out])


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
