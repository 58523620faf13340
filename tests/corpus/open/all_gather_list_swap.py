"""Rank 1 gathers its two tensors in the other order, with the list form of all_gather (the
form PyTorch's test_all_gather, gather and scatter tests use): equal shapes, so gloo runs it and
every rank silently receives rank 1's tensors swapped (rank 0 prints it). On torch 1.x the
capture records each all_gather as the operator c10d::allgather_ (its memory), not as a
collective: the rank files hold no `coll` record, where the same program with all_reduce holds
two. (On CPU the all_reduce swap is not found either: CPU collectives are not named by where
their tensor was made, docs/capture.md.) --fix gathers in one order on every rank."""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
weights = torch.full((4,), 10.0 + rank)
biases = torch.full((4,), 20.0 + rank)
first, second = (weights, biases) if rank != 1 or "--fix" in sys.argv else (biases, weights)
gathered_first = [torch.empty(4) for _ in range(world)]
gathered_second = [torch.empty(4) for _ in range(world)]
dist.all_gather(gathered_first, first)
dist.all_gather(gathered_second, second)
swapped = [r for r in range(world) if gathered_first[r][0].item() != 10.0 + r]
print("rank %d: gathered %s swapped" % (rank, swapped or "none"))
