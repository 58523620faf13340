"""Two groups of the same two ranks, reduced in opposite orders: each rank's stream waits in
the collective the other rank has not reached, and the program hangs (on NCCL as on the
one-GPU backend, and on CPU over gloo). With four ranks, ranks 0-1 and 2-3 each make the pair.
--fix: one order on every rank. Ground truth (uncaptured, no shardcheck): at 2 CPU ranks both
are still inside their first all_reduce (line 34) when a watchdog ends them, 6 s after their
group was made (faulthandler's traceback); --fix prints the pair's sums, grads 1 and stats 1
(python/tests/test_example_truth.py). Captured: --nproc-per-node 4 --timeout 20.
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    pairs = [[r, r + 1] for r in range(0, world - 1, 2)]
    # Every rank takes part in creating every group, in the same order (c10d's rule).
    first = {tuple(p): dist.new_group(p) for p in pairs}
    second = {tuple(p): dist.new_group(p) for p in pairs}
    mine = next(p for p in pairs if rank in p)
    a, b = first[tuple(mine)], second[tuple(mine)]
    grads = torch.full((4096,), float(rank), device=device())
    stats = torch.full((16,), float(rank), device=device())
    order = [(grads, a), (stats, b)]
    if rank == mine[1] and not FIX:
        order.reverse()  # e.g. the statistics reduced early on one rank
    for t, g in order:
        dist.all_reduce(t, group=g)
    print("rank %d: grads %.0f, stats %.0f" % (rank, grads[0].item(), stats[0].item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
