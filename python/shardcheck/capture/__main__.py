"""python3 -m shardcheck.capture [--nproc-per-node N] --out DIR [--device cuda|cpu]
                                 [--timeout S] [--check] [--no-capture] [--no-values]
                                 -- script.py ARGS...

Runs script.py as __main__ (as `python3 script.py ARGS...` would) inside a capture, then
prints where the files are and the command that checks them. With --check (one process, the
whole world) it then runs that command too, however the program ended (it returned, called
sys.exit or os._exit with any status, raised, or was stopped by a signal): capture and check in
one command.

With --nproc-per-node N it is the launcher: it starts N ranks with torchrun's environment
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), each captured; when one rank
ends badly (it raises, crashes, or hangs past --timeout inside a collective) the others are
stopped with SIGTERM, so every rank's file ends whole and marked partial; SIGINT or SIGTERM to
the launcher reaches every rank the same way, and a launcher that dies takes its ranks with it.
Then, with --check, `shardcheck run DIR`.

The folder is this capture's alone (folder.py): locked while it runs, emptied of an earlier
capture's rank files first, and checked only where every rank file is this capture's.

Exit status: with --check, the checker's when it is not 0 (1: a finding, or a partial capture;
2: a capture it refuses), else the program's (or, for the launcher, 1 when a rank failed); 2
when nothing was checked (a rank left no file of this capture) or the command line is wrong.
Without --check, the program's.
"""

import argparse
import math
import os
import runpy
import shutil
import subprocess
import sys
import threading
import traceback
from typing import NamedTuple, Optional

from . import DEFAULT_TIMEOUT, Capture, named_rank
from . import folder
from .folder import UsageError, shown

PROG = "python3 -m shardcheck.capture"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _parser():
    p = _Parser(prog=PROG, description="Capture a PyTorch program for `shardcheck run DIR`.",
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
    return p


def _parse(argv):
    """(arguments, the program's argv); UsageError for a command line that cannot run."""
    p = _parser()
    if "--" in argv:
        i = argv.index("--")
        args, target = p.parse_args(argv[:i]), argv[i + 1:]
    else:  # launchers such as torchrun may drop the "--"
        p.add_argument("program", nargs=argparse.REMAINDER, help="script.py ARGS")
        args = p.parse_args(argv)
        target = args.program
    if not target:
        raise UsageError("give the program after --, e.g. -- train.py --steps 2")
    if not os.path.isfile(target[0]):
        raise UsageError("%s: no such file" % target[0])
    if args.timeout is not None and not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise UsageError("--timeout must be a positive number of seconds")
    if not args.out and not args.no_capture:
        raise UsageError("give --out DIR (the folder for the rank files)")
    if args.no_capture and args.check:
        raise UsageError("--check needs a capture: drop --no-capture")
    if args.nproc_per_node is not None and not 1 <= args.nproc_per_node <= 64:
        raise UsageError("--nproc-per-node must be between 1 and 64 (the checker's bound on "
                         "ranks)")
    return args, target


def main(argv=None):
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        print("%s: error: %s" % (PROG, error), file=sys.stderr)
        return 2


def _main(argv):
    args, target = _parse(argv)
    missing = _missing_torch()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if not args.no_capture:
        _can_capture(args)
    if args.no_values:
        os.environ["SHARDCHECK_CAPTURE_VALUES"] = "0"  # the ranks inherit it
    if args.nproc_per_node is not None:
        from .launch import launch
        return launch(args, target)
    if args.timeout is not None:
        os.environ["SHARDCHECK_CAPTURE_TIMEOUT"] = str(args.timeout)
    if args.no_capture:
        _as_main(target)
        return _run_uncaptured(target[0])
    return _capture_here(args, target)


def _can_capture(args):
    """What would stop the capture at its start, said before any rank runs."""
    import torch
    if os.environ.get("TORCH_CUDA_SANITIZER") is not None:
        raise UsageError("TORCH_CUDA_SANITIZER is set (to any value, it turns torch's own "
                         "sanitizer on): unset it to capture")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: this torch sees no CUDA device (give --device cpu)")


def _as_main(target):
    sys.argv = list(target)
    sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))


def _capture_here(args, target):
    """This process captured: as a rank of the launcher, as one of another launcher's ranks
    (torchrun), or as the whole program (which may start its own ranks)."""
    claim = None
    named = named_rank()
    launched = bool(os.environ.get("SHARDCHECK_LAUNCHED"))
    if launched:
        from .launch import die_with_launcher
        die_with_launcher()
    elif named is not None and named[1] > 1:
        if args.check:
            raise UsageError("--check checks the folder once every rank has ended, which one "
                             "of %d ranks started by another launcher cannot know: check it "
                             "afterwards (shardcheck run %s), or let the capture start the "
                             "ranks (--nproc-per-node N)" % (named[1], shown(args.out)))
        folder.share(args.out)
    else:
        claim = folder.claim(args.out)
    cap = Capture(os.path.abspath(args.out), device=args.device, argv=target)
    _as_main(target)
    try:
        cap.__enter__()
    except Exception as error:  # noqa: BLE001 (said in one line: the program has not run)
        raise UsageError("cannot start the capture: %s" % _one_line(error))
    if launched:
        return _run(cap, target[0]).status  # the launcher reports for every rank
    report = _Report(cap, args, claim)
    cap.at_exit = report.after_os_exit
    return report.finish(_run(cap, target[0]))


class Ended(NamedTuple):
    """How the program ended: its exit status, and why it failed (None when it did not)."""

    status: int
    failure: Optional[str]


def _run(cap, script):
    """The program inside the capture, ended whichever way it ends, reported as Python would
    (a traceback, the message of sys.exit("...")), but never ending this process."""
    error = None
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException as e:  # noqa: BLE001 (every end of the program is reported below)
        error = e
    cap.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)
    if error is None:
        return Ended(0, None)
    if isinstance(error, SystemExit):
        code = error.code
        if code is None or isinstance(code, int):
            status = code or 0
            return Ended(status, "exited with status %d" % status if status else None)
        print(code, file=sys.stderr)
        return Ended(1, "exited: %s" % _one_line(code))
    if cap.handed_over and isinstance(error, Exception):
        print("shardcheck.capture: the program's ranks failed (%s: %s)"
              % (type(error).__name__, _one_line(error)), file=sys.stderr)
    else:
        _print_traceback(error)
    return Ended(130 if isinstance(error, KeyboardInterrupt) else 1,
                 "raised %s" % type(error).__name__)


def _print_traceback(error):
    """The program's traceback, from its own frames (not this file's or runpy's)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb)
    sys.stderr.flush()


def _one_line(what):
    return " ".join(str(what).split())[:300]


class _Report:
    """What the capture says once the program has ended, once: where the files are, and with
    --check the checker's verdict on them, only where every file is this capture's."""

    def __init__(self, cap, args, claim):
        self.cap = cap
        self.args = args
        self.claim = claim
        self._lock = threading.Lock()
        self._status = None

    def after_os_exit(self, status):
        """os._exit ended the program (the file is ended): the report, and the status to exit
        with."""
        return self.finish(Ended(status, "exited with status %d" % status if status else None))

    def finish(self, ended):
        # os._exit on another thread, or a signal, may end the program while its main thread
        # still runs: whichever comes second waits for the first's report.
        with self._lock:
            if self._status is None:
                sys.stdout.flush()
                self._status = self._report(ended)
            return self._status

    def _report(self, ended):
        cap, out = self.cap, shown(self.args.out)
        if cap.handed_over:
            return self._started(ended)
        st, w = cap.recorder.stats, cap.recorder._w
        print("shardcheck.capture: %s: %d records (%d ops, %d allocations, %d frees, %d "
              "collectives)%s" % (cap.path, w.records, st["ops"], st["allocs"], st["frees"],
                                  st["collectives"], ", partial: " + w.failure if w.failure else ""),
              file=sys.stderr)
        if not self.args.check:
            print("shardcheck.capture: check it with: shardcheck run %s%s"
                  % (out, "" if self.claim else " once every rank has ended"), file=sys.stderr)
            return ended.status
        return self._check(ended)

    def _started(self, ended):
        """The program started its own ranks (spawned.py): their files are the capture, whole
        however each ended; checked with --check even when the program failed."""
        from .launch import plural
        if ended.failure is not None and ended.failure.startswith("exited"):
            print("shardcheck.capture: the program %s" % ended.failure, file=sys.stderr)
        files = folder.rank_files(self.cap.out_dir)
        print("shardcheck.capture: %s: %s, started by the program%s"
              % (shown(self.args.out), plural(len(files), "rank file"),
                 "" if ended.status == 0 else ", partial"), file=sys.stderr)
        if not self.args.check:
            print("shardcheck.capture: check it with: shardcheck run %s" % shown(self.args.out),
                  file=sys.stderr)
            return ended.status
        return self._check(ended)

    def _check(self, ended):
        why = folder.unchecked(self.claim.out, self.claim.launch_id, None)
        if why:
            print("shardcheck.capture: %s: not checked, no verdict: %s"
                  % (shown(self.args.out), "; ".join(why)), file=sys.stderr)
            return 2
        code = check(self.claim.out)
        return code if code != 0 else ended.status


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
    sys.stderr.flush()
    return subprocess.call([binary, "run", os.path.abspath(out)])


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
