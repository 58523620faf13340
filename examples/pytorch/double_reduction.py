"""A gradient reduced twice: a gradient hook averages every gradient over the ranks as backward
makes it (data parallelism by hand; --ddp: DistributedDataParallel does it), and the loop then
sums the experts' gradients over the same ranks again, as code written for expert parallelism
does when the experts are not taken out of the data-parallel reduction (pytorch #160285: expert
gradients exactly 2x at EP=2). The experts step with world_size times their gradient, the same
on every rank, so nothing diverges and nothing fails. --fix: the first reduction is the one. On
CPU it runs over gloo (--ddp needs torch 2, whose DDP reduces where the capture sees it).

Ground truth (--check-truth OUT.json, no shardcheck): every rank's first-step gradients against
Model on one process on all ranks' first batches (the gradient of the mean loss over the global
batch). At 2 CPU ranks, without --ddp: the experts' gradients are 2.0 times the reference, the
router's 1.0, the replicas equal; --fix: both 1.0. Held by
python/tests/test_example_truth.py.
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _launch import device, finish, init

FIX = "--fix" in sys.argv
USE_DDP = "--ddp" in sys.argv


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.router = torch.nn.Linear(16, 16)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(2))

    def forward(self, x):
        h = torch.relu(self.router(x))
        return sum(e(h) for e in self.experts)


def averaged(world):
    def hook(grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad.div_(world)
    return hook


def main():
    rank, world = init()
    dev = device()
    torch.manual_seed(0)
    model = Model().to(dev)
    experts = list(model.experts.parameters())
    if USE_DDP:
        model = DDP(model)
    else:
        for p in model.parameters():
            p.register_hook(averaged(world))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(3):
        x = torch.randn(8, 16, generator=data).to(dev)
        loss = model(x).pow(2).mean()
        loss.backward()  # every gradient averaged over the ranks
        if not FIX:
            for p in experts:  # the bug: the experts' gradients summed over the ranks again
                dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.4f" % (rank, loss.item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
