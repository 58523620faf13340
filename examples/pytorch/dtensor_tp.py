"""tp_norm.py's bug with DTensor (torch 2.x): the two linear layers split with
parallelize_module (ColwiseParallel, RowwiseParallel), behind a LayerNorm every rank holds whole.
The norm is computed by hand from each rank's local gradients and all-reduced, so the LayerNorm,
the same on every rank, is counted once per rank. --fix: only the first rank counts the
parameters that are not sharded. Ground truth: tp_norm.py's (--check-truth OUT.json: the block
whole on one process, clip_grad_norm_), which needs torch 2 (CPU over gloo, or GPUs): not run
where torch is 1.13, so it waits for the GPU run (examples/pytorch/README.md). Expected: the
LayerNorm counted 2.0 times, the fix 1.0 (test_example_truth.py runs it where torch has DTensor).
"""

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from _launch import device, finish, init

FIX = "--fix" in sys.argv
WIDTH, HIDDEN, BATCH, MAX_NORM = 16, 32, 8, 0.05


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # the same weights on every rank before they are split
        self.norm = torch.nn.LayerNorm(WIDTH)
        torch.nn.init.normal_(self.norm.weight, 1.0, 0.1)
        self.up = torch.nn.Linear(WIDTH, HIDDEN, bias=False)
        self.down = torch.nn.Linear(HIDDEN, WIDTH, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


def main():
    rank, world = init()
    dev = device()
    mesh = init_device_mesh(dev.type, (world,))
    model = parallelize_module(Block().to(dev), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)  # DTensors and plain tensors
    data = torch.Generator().manual_seed(100)  # tensor-parallel ranks see the same batch
    for step in range(2):
        x = torch.randn(BATCH, WIDTH, generator=data).to(dev)
        loss = model(x).pow(2).mean()
        loss.backward()
        local = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad for p in model.parameters()
                 if not (FIX and rank != 0 and not isinstance(p, DTensor))]  # the fix
        squares = torch.stack([g.pow(2).sum() for g in local]).sum().reshape(1)
        dist.all_reduce(squares)  # the bug: the LayerNorm's squares come from every rank
        scale = min(MAX_NORM / (squares.sqrt().item() + 1e-6), 1.0)  # a number: DTensors take it
        for p in model.parameters():
            p.grad.mul_(scale)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.4f, grad norm %.6f" % (rank, loss.item(), squares.sqrt().item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
