"""The launcher behind ``python3 -m shardcheck.capture --nproc-per-node N``: N captured ranks
on this machine with torchrun's environment, ended together when one ends badly, and checked.
It needs no torchrun (Debian's torch 1.13 ``torchrun`` fails at start-up under Python 3.11).

It claims the folder before any rank starts (folder.py: locked, emptied of an earlier capture's
rank files, a launch id each rank writes), checks it only when every rank wrote its file in this
launch, and never exits 0 when a rank failed. Its ranks end with it, even when it is killed.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from . import folder
from .folder import shown

# After the first rank ends badly, how long the others may take to finish on their own (a
# rank that raised while the others are at their last collective), and then, after SIGTERM,
# to write their files.
GRACE_S = 5.0
TERM_S = 10.0
# The launcher's pid, in each rank's environment (die_with_launcher).
LAUNCHER_ENV = "SHARDCHECK_LAUNCHER_PID"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_store(port):
    """The ranks' TCPStore, hosted here as torchrun's agent hosts it, so that a rank 0 that
    finishes first does not take the store from ranks still using it (the one-GPU backend
    hands out shared memory through it); None where this torch cannot host one (the ranks
    then host it on rank 0, as a plain env:// rendezvous does)."""
    try:
        from datetime import timedelta

        import torch.distributed as dist
        return dist.TCPStore("127.0.0.1", port, None, True, timedelta(seconds=300),
                             wait_for_workers=False)
    except Exception:  # no torch.distributed here, or a TCPStore without these arguments
        return None


def rank_env(rank, n, port, timeout, agent=False):
    env = dict(os.environ)
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(n), "ROLE_NAME": "default", "GROUP_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "TORCHELASTIC_RUN_ID": "shardcheck-capture", "SHARDCHECK_LAUNCHED": "1",
                LAUNCHER_ENV: str(os.getpid()),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if agent:  # init_process_group connects to the launcher's store instead of hosting one
        env.update({"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"})
    if timeout is not None:
        env["SHARDCHECK_CAPTURE_TIMEOUT"] = str(timeout)
    # The ranks import this package as the launcher did.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def describe(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return "killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "killed by signal %d" % -code
    if code == 124:
        return "hung past the timeout (exit 124)"
    return "exit %d" % code


def launch(args, target):
    n = args.nproc_per_node
    claim = None if args.no_capture else folder.claim(args.out)
    port = free_port()
    cmd = [sys.executable, "-m", "shardcheck.capture"]
    cmd += ["--no-capture"] if args.no_capture else ["--out", claim.out]
    if args.device:
        cmd += ["--device", args.device]
    cmd += ["--"] + list(target)
    print("shardcheck.capture: %s of %s %s" % (
        plural(n, "rank"), " ".join(target),
        "uncaptured" if args.no_capture else "into " + shown(args.out)),
        file=sys.stderr, flush=True)
    store = agent_store(port)
    procs = [subprocess.Popen(cmd, env=rank_env(r, n, port, args.timeout, store is not None))
             for r in range(n)]
    stopped_by = _wait(procs)
    codes = [p.returncode for p in procs]
    for r, code in enumerate(codes):
        if code != 0:
            print("shardcheck.capture: rank %d: %s" % (r, describe(code)), file=sys.stderr)
    if args.no_capture:
        if stopped_by is not None:
            return 128 + stopped_by
        return 0 if all(c == 0 for c in codes) else 1
    return _report(args, claim, codes, stopped_by)


def _wait(procs):
    """Until every rank has ended: once one ends badly, or SIGINT or SIGTERM comes, the others
    get GRACE_S, then SIGTERM, then after TERM_S SIGKILL. Returns the signal that stopped the
    launcher, or None."""
    stop = {"signal": None}

    def on_signal(signo, frame):
        stop["signal"] = signo

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    ending_since = terminated_at = None
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if ending_since is None:
                for r, p in enumerate(procs):
                    code = p.poll()
                    if code is not None and code != 0:
                        ending_since = now
                        print("shardcheck.capture: rank %d ended badly (%s): stopping the others"
                              % (r, describe(code)), file=sys.stderr, flush=True)
                        break
            if terminated_at is None and (stop["signal"] is not None or
                                          (ending_since is not None and now - ending_since > GRACE_S)):
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                terminated_at = now
            if terminated_at is not None and now - terminated_at > TERM_S:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.05)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return stop["signal"]


def _report(args, claim, codes, stopped_by):
    """The capture's files, checked with --check only where every rank wrote its own in this
    launch; the exit status is never 0 where a rank failed."""
    whole = all(c == 0 for c in codes)
    out = shown(args.out)
    why = folder.unchecked(claim.out, claim.launch_id, len(codes))
    if why:
        print("shardcheck.capture: %s: not checked, no verdict: %s"
              % (out, "; ".join(why)), file=sys.stderr, flush=True)
        return 2
    print("shardcheck.capture: %s: %s%s" % (
        out, plural(len(codes), "rank file"),
        "" if whole else ", partial (shardcheck run names where each rank ended)"),
        file=sys.stderr, flush=True)
    if not args.check:
        print("shardcheck.capture: check it with: shardcheck run %s" % out, file=sys.stderr)
        if stopped_by is not None:
            return 128 + stopped_by
        return 0 if whole else 1
    from .__main__ import check
    code = check(claim.out)
    return code if code != 0 or whole else 1


def die_with_launcher():
    """In a rank: SIGTERM (its file ends partial) once the launcher that started it is gone,
    even killed with SIGKILL, instead of waiting in a collective for its timeout. Linux only
    (prctl PR_SET_PDEATHSIG); elsewhere a rank outlives a killed launcher."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != int(launcher):  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def plural(n, noun):
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")
