"""Two ranks reduce two gradients of equal shape in different orders: the collectives match
by shape, so nothing fails, and each rank adds its first gradient to the other rank's second.
--fix: one order on every rank. CPU: over gloo. Ground truth (uncaptured, no shardcheck): the
printed values against the sums, 3 and 21 at 2 ranks: the bug prints 12 and 12 on both ranks
(1 + 11, 10 + 2), --fix the sums (python/tests/test_example_truth.py).
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    weight_grad = torch.full((1024,), 1.0 + rank, device=device())
    bias_grad = torch.full((1024,), 10.0 + rank, device=device())
    order = [weight_grad, bias_grad]
    if rank == 1 and not FIX:
        order.reverse()  # e.g. a dict of buckets iterated in a rank-dependent order
    for g in order:
        dist.all_reduce(g)
    print("rank %d: weight_grad %.0f, bias_grad %.0f" % (rank, weight_grad[0], bias_grad[0]))
    finish()


if __name__ == "__main__":
    main()
