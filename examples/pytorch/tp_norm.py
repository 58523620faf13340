"""Tensor parallelism by hand, and a gradient norm that counts the replicated LayerNorm once per
rank: a block of two linear layers split over the ranks as Megatron splits them (the first by
output rows, the second by input columns; an all_reduce in the backward of the block's input and
in the forward of its output), behind a LayerNorm that every rank holds whole. The LayerNorm's
gradients are the same on every rank. Each rank sums the squares of all its gradients and the
sums are all-reduced over the ranks for the global norm: the sharded weights are counted once,
but the LayerNorm once per rank, so the norm is too large and clipping scales every gradient by
the wrong factor (Megatron-LM #7227's kind). --fix: only the first rank counts the parameters
every rank holds (Megatron's param_is_not_tensor_parallel_duplicate). CPU: over gloo.

Ground truth (--check-truth OUT.json, no shardcheck): the block with its whole weights on one
process, on the same batch; clip_grad_norm_ of its gradients, and its gradients clipped to 0.05.
At 2 CPU ranks: the norm 1.052 times the reference's, the LayerNorm counted 2.0 times, every
stepped gradient 0.950 times the clipped reference's; --fix: 1.0 each (test_example_truth.py).
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
WIDTH, HIDDEN, BATCH, MAX_NORM = 16, 32, 8, 0.05


class CopyToParallel(torch.autograd.Function):
    """The block's input: the same on every rank going forward, its gradient summed coming back."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    """The block's output: each rank's partial sum, summed going forward."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class Block(torch.nn.Module):
    def __init__(self, rank, world):
        super().__init__()
        torch.manual_seed(0)  # the same full weights on every rank; each keeps its part
        self.norm = torch.nn.LayerNorm(WIDTH)
        torch.nn.init.normal_(self.norm.weight, 1.0, 0.1)
        up = torch.randn(HIDDEN, WIDTH) * 0.2
        down = torch.randn(WIDTH, HIDDEN) * 0.2
        part = HIDDEN // world
        self.up = torch.nn.Parameter(up[rank * part:(rank + 1) * part].clone())  # rows
        self.down = torch.nn.Parameter(down[:, rank * part:(rank + 1) * part].clone())  # columns

    def forward(self, x):
        h = CopyToParallel.apply(self.norm(x))
        return x + ReduceFromParallel.apply(torch.relu(h @ self.up.t()) @ self.down.t())


def main():
    rank, world = init()
    dev = device()
    model = Block(rank, world).to(dev)
    replicated = {id(p) for p in model.norm.parameters()}  # every rank holds them whole
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100)  # tensor-parallel ranks see the same batch
    for step in range(2):
        x = torch.randn(BATCH, WIDTH, generator=data).to(dev)
        loss = model(x).pow(2).mean()
        loss.backward()
        counted = [p for p in model.parameters()
                   if not (FIX and rank != 0 and id(p) in replicated)]  # the fix
        squares = torch.stack([p.grad.pow(2).sum() for p in counted]).sum().reshape(1)
        dist.all_reduce(squares)  # the bug: the LayerNorm's squares come from every rank
        norm = squares.sqrt()
        scale = torch.clamp(MAX_NORM / (norm + 1e-6), max=1.0)
        for p in model.parameters():
            p.grad.mul_(scale)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.4f, grad norm %.6f" % (rank, loss.item(), norm.item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
