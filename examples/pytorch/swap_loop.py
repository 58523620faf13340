"""Four ranks as a 2x2 mesh: each rank all-reduces two gradients of one shape over its row, from
one line in a loop over a list, and on rank 1 the list is in the other order (as a dict of buckets
iterated in a rank-dependent order would be). The shapes match, so nothing fails: ranks 0 and 1
each add their first gradient to the other's second. Run with --fix for the repair: one order on
every rank.

    python3 -m shardcheck.capture --nproc-per-node 4 --out DIR --check -- examples/pytorch/swap_loop.py

Ground truth: each rank prints its two gradients after the reductions (JSON); ranks 0 and 1 are
apart from the single-process sums, the fix's equal (test_collectives.py). CPU: gloo.
"""

import json
import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
ROWS = 2  # the mesh is ROWS x (world / ROWS); a row is the ranks that reduce together


def row_group(rank, world):
    """This rank's row of the mesh; every rank makes every row's group, in the same order."""
    mine = None
    for first in range(0, world, world // ROWS):
        g = dist.new_group(list(range(first, first + world // ROWS)))
        if first <= rank < first + world // ROWS:
            mine = g
    return mine


def main():
    rank, world = init()
    row = row_group(rank, world)
    grads = [torch.full((1024,), 10.0 * k + rank + 1, device=device()) for k in range(2)]
    order = list(grads)
    if rank == 1 and not FIX:
        order.reverse()
    for g in order:
        dist.all_reduce(g, group=row)
    print(json.dumps({"rank": rank, "grads": [g[0].item() for g in grads]}), flush=True)
    finish()


if __name__ == "__main__":
    main()
