"""Hand-written data parallelism that leaves one parameter out of the gradient reduction: the
loop averages the gradients of `model.body` over the ranks but not the head's, so each rank steps
the head with its own gradient and the replicas drift apart from the first step on, with no
error and a loss that still falls (missing_reduction). --fix reduces every parameter.
--scheduler: every gradient is averaged, but the learning-rate schedule is stepped inside the
rank-0 logging block, so from the second step on rank 0 steps with another learning rate than the
others and the replicas drift apart with equal gradients (replica_divergence). --fix steps it on
every rank. On a machine without CUDA it runs on CPU over gloo.

Ground truth (--check-truth OUT.json, no shardcheck): every rank's first-step gradients against
Model on one process on all ranks' first batches (the gradient of the mean loss over the global
batch), and the replicas compared across ranks after each step. At 2 CPU ranks: the head's
gradient is no multiple of the reference (projections 0.53 and 1.47) and the heads drift while
the bodies stay equal; --scheduler: equal gradients, rates 0.05 and 0.1 at the second step, every
parameter drifts; each --fix matches the reference and stays equal (test_example_truth.py).
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
SCHEDULER = "--scheduler" in sys.argv


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
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    reduced = model.parameters() if FIX or SCHEDULER else model.body.parameters()
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
        if SCHEDULER and (FIX or rank == 0):  # the bug: stepped where rank 0 logs
            schedule.step()
    print("rank %d: loss %.4f, head weight sum %.6f" % (rank, loss.item(),
                                                        model.head.weight.sum().item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
