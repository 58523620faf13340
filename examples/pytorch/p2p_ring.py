"""PyTorch's ring of point-to-point transfers: each rank isends to the next and irecvs from the
previous, waits for both and passes on what it received. It runs to the end on gloo and says
so ("rank R: received V, expected V"). Its variants, each with --fix for the repair:

--deadlock     every rank calls the blocking dist.recv first: each waits for a send its peer
               never reaches, and the program hangs (--fix: even ranks send first).
--read-early   reads the irecv's buffer before its wait: the transfer may still be writing it
               (--fix: read after the wait).
--write-early  refills the isend's buffer before its wait: the transfer may still be reading
               it (--fix: refill after the wait).
--batch        posts both with dist.batch_isend_irecv (no bug).

Ground truth (uncaptured, no shardcheck): what it prints. On CPU over gloo --deadlock runs until
its timeout (test_p2p.py); early reads were stale and early refills reached the peer in some
steps, and every --fix received what it should (test_example_truth.py)."""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
STEPS = 2


def exchange(send, recv, nxt, prev):
    """One step of the ring; returns what the program read of recv before its wait, if it did."""
    if "--batch" in sys.argv:
        s, r = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                       dist.P2POp(dist.irecv, recv, prev)])
    else:
        s = dist.isend(send, nxt)
        r = dist.irecv(recv, prev)
    early = None
    if "--read-early" in sys.argv and not FIX:
        early = recv.clone()  # the irecv may still be writing it
    if "--write-early" in sys.argv and not FIX:
        send.fill_(-1.0)  # the isend may still be reading it
    s.wait()
    r.wait()
    if "--write-early" in sys.argv and FIX:
        send.fill_(-1.0)
    return early


def deadlock(send, recv, nxt, prev, rank):
    """Blocking calls: every rank receives first (--fix: even ranks send first)."""
    if FIX and rank % 2 == 0:
        dist.send(send, nxt)
        dist.recv(recv, prev)
    else:
        dist.recv(recv, prev)
        dist.send(send, nxt)


def main():
    rank, world = init()
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    send = torch.full((1 << 16,), float(rank), device=device())
    recv = torch.zeros_like(send)
    stale = 0
    for _ in range(STEPS):
        if "--deadlock" in sys.argv:
            deadlock(send, recv, nxt, prev, rank)
        else:
            early = exchange(send, recv, nxt, prev)
            stale += early is not None and not torch.equal(early, recv)
        send.copy_(recv)
    want = float((rank - STEPS) % world)
    got = recv.unique().tolist()
    print("rank %d: received %s, expected %s; read before its wait and stale: %d of %d steps"
          % (rank, got, [want], stale, STEPS), flush=True)
    finish()
    racy = ("--read-early" in sys.argv or "--write-early" in sys.argv) and not FIX
    sys.exit(0 if got == [want] or racy else 1)


if __name__ == "__main__":
    main()
