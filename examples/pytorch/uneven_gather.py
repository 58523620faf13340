"""Each rank gathers every rank's scores for its last batch, which is shorter on rank 0 (the data
does not divide evenly): dist.all_gather into a list of tensors shaped like the rank's own. The
ranks pass different sizes; on gloo rank 0 aborts when a longer message arrives, on NCCL the call
hangs or reads past the shorter buffers. Run with --fix for the repair: gather the lengths, pad
every rank's scores to the longest, gather those, and trim.

    python3 -m shardcheck.capture --nproc-per-node 2 --out DIR --check -- examples/pytorch/uneven_gather.py

Ground truth: uncaptured on gloo rank 0 aborts; the fix prints every rank's scores (JSON) on
each rank (test_collectives.py). On a machine without CUDA it runs on CPU over gloo.
"""

import json
import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


def gather_scores(scores, world):
    if not FIX:
        parts = [torch.zeros_like(scores) for _ in range(world)]
        dist.all_gather(parts, scores)
        return parts
    length = torch.tensor([scores.numel()], device=scores.device)
    lengths = [torch.zeros_like(length) for _ in range(world)]
    dist.all_gather(lengths, length)
    longest = int(max(n.item() for n in lengths))
    padded = torch.zeros(longest, device=scores.device)
    padded[:scores.numel()] = scores
    parts = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return [p[:int(n.item())] for p, n in zip(parts, lengths)]


def main():
    rank, world = init()
    batch = 4 if rank == 0 else 8  # the last batch: what is left of the data on each rank
    scores = torch.arange(batch, device=device(), dtype=torch.float32) + 100 * rank
    parts = gather_scores(scores, world)
    print(json.dumps([p.tolist() for p in parts]), flush=True)
    finish()


if __name__ == "__main__":
    main()
