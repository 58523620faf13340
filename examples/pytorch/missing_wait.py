"""An asynchronous all-reduce whose result is read before work.wait(): the reduction runs on the
process group's stream, and the compute stream reads the gradient while it may still be in
flight. On the hardware the read sees the gradient before the reduction (the printed sum is
this rank's own, not the group's). Run with --fix for the repair: wait before reading.

    python3 -m shardcheck.capture --nproc-per-node 4 --out DIR --check -- \\
        examples/pytorch/missing_wait.py
"""

import sys

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    grad = torch.full((1 << 20,), float(rank + 1), device="cuda")
    torch.cuda._sleep(50_000_000)  # the compute stream is still busy when the reduction is issued
    work = dist.all_reduce(grad, async_op=True)
    if FIX:
        work.wait()
    norm = grad.sum()  # the compute stream reads grad
    if not FIX:
        work.wait()
    want = float(sum(range(1, world + 1)) * grad.numel())
    print("rank %d: sum %.0f (the group's: %.0f)" % (rank, norm.item(), want), flush=True)
    finish()


if __name__ == "__main__":
    main()
