"""An asynchronous all-reduce whose result is read before work.wait(): the reduction runs on the
process group's stream, and the compute stream reads the gradient while it may still be in
flight. On the hardware the read sees the gradient before the reduction (the printed sum is
this rank's own, not the group's). Run with --fix for the repair: wait before reading.
Ground truth (GPU only, no shardcheck): that printed sum against the group's, and the documented
semantics of an async collective's wait(); examples/pytorch/README.md says which runs hold it.
Captured: python3 -m shardcheck.capture --nproc-per-node 4 --out DIR --check -- this file.
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


def spawned(rank, world):
    """With --spawn N the program starts its own N ranks with torch.multiprocessing.spawn (as
    PyTorch's DDP tutorial does), with --processes N as a multiprocessing.Process each (as its
    "Writing distributed applications" tutorial does); either is captured without the
    launcher's --nproc-per-node."""
    import os
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    main()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    if "--spawn" in sys.argv:
        n = int(sys.argv[sys.argv.index("--spawn") + 1])
        mp.spawn(spawned, args=(n,), nprocs=n)
    elif "--processes" in sys.argv:
        n = int(sys.argv[sys.argv.index("--processes") + 1])
        mp.set_start_method("spawn")  # CUDA in the children
        procs = [mp.Process(target=spawned, args=(rank, n)) for rank in range(n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        sys.exit(max(p.exitcode for p in procs))
    else:
        main()
