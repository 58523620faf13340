"""What gloo's point-to-point calls really do, measured on two CPU processes (docs/p2p.md).

    python3 bench/capture/gloo_p2p.py [--timeout S] [--only CASE]

Each case runs two ranks of this script; once both have made their process group (so start-up
on a busy machine does not count), a rank still running S seconds later (default 10) is killed
and the case reads "hangs". Prints one line per case and size, and what the ranks printed.
"""

import argparse
import os
import socket
import subprocess
import sys
import time

SIZES_HANG = [16, 1024, 65536, 1 << 20, 64 << 20]
CASES = [
    # (name, sizes, what it shows)
    ("paired", [16, 65536, 64 << 20], "rank 0 sends then receives, rank 1 the reverse: done"),
    ("send-first", SIZES_HANG, "both ranks call the blocking dist.send first"),
    ("recv-first", [16, 64 << 20], "both ranks call the blocking dist.recv first"),
    ("isend-wait-first", [16, 64 << 20], "both isend and wait before posting their receive"),
    ("ring", [16, 64 << 20], "both isend, then irecv, then wait for both (the tutorial's ring)"),
    ("isend-unmatched", [16, 64 << 20], "is an isend done before its peer posts the receive?"),
    ("irecv-progress", [1 << 20], "does a posted irecv fill its tensor before its wait?"),
    ("irecv-early", [1 << 20], "the irecv's tensor read before its wait, the send 0.5 s late"),
    ("poll", [16], "does is_completed() ever answer True before wait()?"),
]


def rank_main(case, nbytes, rank, port):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=2)
    dist.barrier()
    print("ready", flush=True)
    peer = 1 - rank
    n = max(nbytes // 4, 1)
    send, recv = torch.full((n,), float(rank + 1)), torch.zeros(n)
    say = lambda *a: print("rank %d:" % rank, *a, flush=True)  # noqa: E731
    if case == "paired":
        if rank == 0:
            dist.send(send, peer)
            dist.recv(recv, peer)
        else:
            dist.recv(recv, peer)
            dist.send(send, peer)
    elif case == "send-first":
        dist.send(send, peer)
        dist.recv(recv, peer)
    elif case == "recv-first":
        dist.recv(recv, peer)
        dist.send(send, peer)
    elif case == "isend-wait-first":
        dist.isend(send, peer).wait()
        dist.recv(recv, peer)
    elif case == "ring":
        s, r = dist.isend(send, peer), dist.irecv(recv, peer)
        s.wait()
        r.wait()
    elif case == "isend-unmatched":
        s = dist.isend(send, peer)
        time.sleep(2)
        say("isend done 2 s later, the peer's receive not posted:", s.is_completed())
        dist.barrier()
        dist.irecv(recv, peer).wait()
        s.wait()
    elif case == "irecv-progress":
        if rank == 0:
            r = dist.irecv(recv, peer)
            time.sleep(2)  # the peer sent at once
            say("2 s after irecv, before wait: sum", recv.sum().item(), "is_completed",
                r.is_completed())
            r.wait()
        else:
            dist.isend(send, peer).wait()
    elif case == "irecv-early":
        if rank == 0:
            r = dist.irecv(recv, peer)
            early = recv.sum().item()
            r.wait()
            say("read before wait: sum", early, "after: sum", recv.sum().item())
        else:
            time.sleep(0.5)
            dist.send(send, peer)
    elif case == "poll":
        s, r = dist.isend(send, peer), dist.irecv(recv, peer)
        t0 = time.monotonic()
        while not r.is_completed() and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        say("irecv is_completed after 5 s of polling:", r.is_completed(), "isend:",
            s.is_completed())
        r.wait()
        s.wait()
        say("after wait:", r.is_completed(), s.is_completed())
    say("done, received", recv[0].item())  # a rank that hangs never gets here


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(case, nbytes, timeout):
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port),
                               "--case", case, "--bytes", str(nbytes)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for r in range(2)]
    for p in procs:
        p.stdout.readline()  # "ready", or "" if it failed to start
    deadline = time.monotonic() + timeout
    hung = []
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(r)
    for p in procs:
        p.kill()
    outs = [p.communicate()[0] for p in procs]
    lines = [line for out in outs for line in out.splitlines()]
    verdict = "hangs (ranks %s still running at %g s)" % (hung, timeout) if hung else "done"
    return verdict, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--only")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--port", type=int)
    ap.add_argument("--case")
    ap.add_argument("--bytes", type=int)
    a = ap.parse_args()
    if a.rank is not None:
        return rank_main(a.case, a.bytes, a.rank, a.port)
    import torch
    print("torch %s, gloo, 2 CPU processes, %s, timeout %g s" % (
        torch.__version__, os.uname().machine, a.timeout))
    for case, sizes, what in CASES:
        if a.only and a.only != case:
            continue
        for nbytes in sizes:
            verdict, lines = run_case(case, nbytes, a.timeout)
            print("%-17s %9d B  %s  -- %s" % (case, nbytes, verdict, what), flush=True)
            for line in lines:
                if "done, received" not in line and line != "ready":
                    print("    " + line)


if __name__ == "__main__":
    main()
