"""Hand-written data parallelism that leaves one parameter out of the gradient reduction: the
loop averages the gradients of `model.body` over the ranks but not the head's, so each rank steps
the head with its own gradient and the replicas drift apart from the first step on, with no
error and a loss that still falls. Run with --fix for the repair: reduce every parameter.

    python3 -m shardcheck.capture --nproc-per-node 2 --out DIR --check -- \\
        examples/pytorch/replica_drift.py

On a machine without CUDA it runs on CPU over gloo.
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    rank, world = init()
    dev = device()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = Model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    reduced = model.parameters() if FIX else model.body.parameters()
    reduced = list(reduced)
    for step in range(3):
        x = torch.randn(8, 16, generator=data).to(dev)
        y = torch.randn(8, 4, generator=data).to(dev)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in reduced:  # the bug: the head's gradients are never averaged
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.4f, head weight sum %.6f" % (rank, loss.item(),
                                                        model.head.weight.sum().item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
