"""A gradient accumulator made with torch.empty and summed into before it was ever written:
microbatch gradients go into a flat buffer that is then all-reduced, and the first `+=` reads
whatever the allocator's block held before (a freed activation, last step's gradients), which
the all-reduce spreads to every rank. --fix: torch.zeros. Ground truth (--check-truth OUT.json,
no shardcheck): what torch.empty handed over, and the all-reduced accumulator against the fix's
run (same seed, same data): bit for bit the same while the block came zeroed, different from the
step where it held old bytes, on CPU the second (python/tests/test_example_truth.py)."""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    dev = device()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 16)).to(dev)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    for step in range(2):
        flat = torch.zeros(total, device=dev) if FIX else torch.empty(total, device=dev)
        for micro in range(2):
            x = torch.randn(32, 256, device=dev)
            model(x).square().mean().backward()
            flat += torch.cat([p.grad.reshape(-1) for p in params])  # the first += reads flat
            model.zero_grad(set_to_none=True)
        dist.all_reduce(flat)
        flat /= world
        with torch.no_grad():
            offset = 0
            for p in params:
                p -= 0.01 * flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
    finish()


if __name__ == "__main__":
    main()
