"""A gradient accumulator made with torch.empty and summed into before it was ever written.

Microbatch gradients are accumulated into a flat buffer, which is then all-reduced: the buffer
comes from torch.empty, so the first `+=` reads whatever the allocator's block held before (a
freed activation, last step's gradients): every rank sums garbage into its gradients, and the
all-reduce spreads it. Run with --fix for the repair: torch.zeros.
"""

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
