"""Tensor parallelism by hand with Megatron's main_grad buffers, at 2 ranks: a LayerNorm every rank
holds whole feeds a column-parallel projection split by rows; the backward all-reduces the
LayerNorm's output gradient over the ranks (Megatron's copy-to-tensor-parallel region), so the
LayerNorm's gradient is whole and the same on every rank. Gradients are accumulated into fp32
main_grad buffers, and the gradient norm is taken over main_grad before it is copied into the
.grad the optimizer steps with, as Megatron's optimizer does.

The bug: every rank counts every main_grad in the norm, the LayerNorm's too, so the norm's sum
over the ranks counts the LayerNorm twice (NeMo-RL #3788, Megatron's
param_is_not_tensor_parallel_duplicate). --fix counts it on rank 0 only.

Ground truth (--check-truth): one process runs the whole projection on the same batch and takes
torch.nn.utils.clip_grad_norm_'s norm of its gradients; rank 0 prints both norms. The bug's norm
is larger than the reference's (the LayerNorm's squares twice), the fix's equal to rounding.

    python3 -m shardcheck.capture --nproc-per-node 2 --out DIR --check -- examples/pytorch/main_grad_norm.py

On a machine without CUDA it runs on CPU over gloo.
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
TRUTH = "--check-truth" in sys.argv


class CopyToParallel(torch.autograd.Function):
    """The identity going forward; the gradient all-reduced over the ranks coming back."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def batches():
    data = torch.Generator().manual_seed(5)  # one batch for both tensor-parallel ranks
    return [torch.randn(4, 8, generator=data) for _ in range(2)]


def main():
    rank, world = init()
    dev = device()
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(8).to(dev)
    full = torch.randn(8, 8)
    w = torch.nn.Parameter(full.chunk(world)[rank].clone().to(dev))  # column-parallel: rows split
    params = [norm.weight, norm.bias, w]
    main_grads = [torch.zeros_like(p) for p in params]  # Megatron's fp32 main_grad buffers
    opt = torch.optim.SGD(params, lr=0.1)
    norms = []
    for x in batches():
        y = CopyToParallel.apply(norm(x.to(dev))) @ w.t()
        y.pow(2).sum().backward()
        for p, m in zip(params, main_grads):
            m.add_(p.grad)
        squares = torch.zeros(1, device=dev)
        for p, m in zip(params, main_grads):
            if p is w or rank == 0 or not FIX:  # the bug: the LayerNorm counted on every rank
                squares += m.pow(2).sum()
        dist.all_reduce(squares)
        norms.append(squares.sqrt().item())
        for p, m in zip(params, main_grads):
            p.grad.copy_(m)
            m.zero_()
        opt.step()
        opt.zero_grad()
    if TRUTH and rank == 0:
        print("norm %.6f reference %.6f" % (norms[0], reference(full)), flush=True)
    finish()


def reference(full):
    """clip_grad_norm_'s norm of the whole model's gradients on one process, first batch."""
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(8).double()
    w = full.double().requires_grad_()
    (norm(batches()[0].double()) @ w.t()).pow(2).sum().backward()
    return torch.nn.utils.clip_grad_norm_(list(norm.parameters()) + [w], float("inf")).item()


if __name__ == "__main__":
    main()
