"""The launcher behind ``python3 -m shardcheck.capture --nproc-per-node N``: N captured ranks
on this machine with torchrun's environment, ended together when one ends badly, and checked.
It needs no torchrun (Debian's torch 1.13 ``torchrun`` fails at start-up under Python 3.11).
"""

import os
import signal
import socket
import subprocess
import sys
import time

# After the first rank ends badly, how long the others may take to finish on their own (a
# rank that raised while the others are at their last collective), and then, after SIGTERM,
# to write their files.
GRACE_S = 5.0
TERM_S = 10.0


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
                "TORCHELASTIC_RUN_ID": "shardcheck-capture", "SHARDCHECK_LAUNCHED": "1", "OMP_NUM_THREADS":
                    os.environ.get("OMP_NUM_THREADS", "1")})
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
    port = free_port()
    cmd = [sys.executable, "-m", "shardcheck.capture"]
    cmd += ["--no-capture"] if args.no_capture else ["--out", args.out]
    if args.device:
        cmd += ["--device", args.device]
    cmd += ["--"] + list(target)
    print("shardcheck.capture: %s of %s %s" % (
        plural(n, "rank"), " ".join(target),
        "uncaptured" if args.no_capture else "into " + args.out),
        file=sys.stderr, flush=True)
    store = agent_store(port)
    procs = [subprocess.Popen(cmd, env=rank_env(r, n, port, args.timeout, store is not None))
             for r in range(n)]
    stop = {"signal": None}

    def on_signal(signo, frame):
        stop["signal"] = signo

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    first_bad = None  # (rank, code)
    ending_since = None
    terminated_at = None
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if first_bad is None:
                for r, p in enumerate(procs):
                    code = p.poll()
                    if code is not None and code != 0:
                        first_bad = (r, code)
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
    codes = [p.returncode for p in procs]
    for r, code in enumerate(codes):
        if code != 0:
            print("shardcheck.capture: rank %d: %s" % (r, describe(code)), file=sys.stderr)
    whole = all(c == 0 for c in codes)
    if args.no_capture:
        if stop["signal"] is not None:
            return 128 + stop["signal"]
        return 0 if whole else 1
    print("shardcheck.capture: %s: %s%s" % (
        args.out, plural(n, "rank file"),
        "" if whole else ", partial (shardcheck run names where each rank ended)"),
        file=sys.stderr, flush=True)
    if not args.check:
        print("shardcheck.capture: check it with: shardcheck run %s" % args.out, file=sys.stderr)
        if stop["signal"] is not None:
            return 128 + stop["signal"]
        return 0 if whole else 1
    from .__main__ import check
    return check(args.out)


def plural(n, noun):
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")
