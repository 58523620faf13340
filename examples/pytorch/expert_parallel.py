"""Expert parallelism by hand, at 4 ranks: two experts, each held by the two ranks of its
expert-data-parallel group (ranks 0, 2 hold expert 0; ranks 1, 3 expert 1). Each step the router,
replicated on every rank, scores the tokens and each expert takes its best 4 from every rank
(expert-choice routing); all_to_all sends them to the rank of their expert in the expert-parallel
group (0, 1 or 2, 3) and brings the results back. The router's gradients are averaged over all 4
ranks. Each expert's gradient is summed over the 2 ranks that hold it, its expert-data-parallel
group; the backward of the all_to_all has already brought each expert the gradient of every
rank's tokens of its expert-parallel group, so that sum carries the losses of all 4 ranks.

The bug (DeepSpeed #6546, "expert gradient average: divide edp_world_size -> divide
dp_world_size"): the experts' sums are divided by the size of the group that summed, 2, instead
of the data-parallel world's, 4, as the router's are: they step with twice their gradient, the
same on both replicas, so nothing diverges and nothing fails. --fix divides by the world size.
On a machine without CUDA it runs on CPU over gloo.

Ground truth (--check-truth OUT.json, no shardcheck): every rank's first-step gradients against
the router and both experts on one process, every rank's first batch routed as the program
routes it (the gradient of the mean of the 4 ranks' losses). At 4 CPU ranks: the experts'
gradients are 2.0 times the reference, the router's 1.0; --fix: both 1.0
(python/tests/test_example_truth.py).
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn

from _launch import device, finish, init

FIX = "--fix" in sys.argv
EP = 2  # experts, and ranks of an expert-parallel group
CAPACITY = 4  # tokens each expert takes from each rank (expert-choice routing)


def groups(rank, world):
    """(expert-parallel group, expert-data-parallel group) of this rank; every rank creates every
    group, in the same order."""
    ep = edp = None
    for first in range(0, world, EP):
        g = dist.new_group(list(range(first, first + EP)))
        if first <= rank < first + EP:
            ep = g
    for e in range(EP):
        g = dist.new_group(list(range(e, world, EP)))
        if rank % EP == e:
            edp = g
    return ep, edp


class Layer(torch.nn.Module):
    def __init__(self, ep_group):
        super().__init__()
        self.router = torch.nn.Linear(16, EP)
        self.expert = torch.nn.Linear(16, 16)  # this rank's expert: rank % EP
        self.ep_group = ep_group

    def forward(self, x):
        gate = torch.softmax(self.router(x), dim=-1)  # tokens x experts
        score, picked = gate.topk(CAPACITY, dim=0)  # each expert takes its CAPACITY best tokens
        rows = picked.t().reshape(-1)  # expert 0's tokens, then expert 1's
        # to the rank of each expert in this expert-parallel group, and back
        tokens = dfn.all_to_all_single(torch.empty_like(x[rows]), x[rows], group=self.ep_group)
        done = torch.relu(self.expert(tokens))
        back = dfn.all_to_all_single(torch.empty_like(done), done, group=self.ep_group)
        return torch.zeros_like(x).index_add(0, rows, back * score.t().reshape(-1, 1))


def main():
    rank, world = init()
    assert world % EP == 0, "run with a multiple of %d ranks" % EP
    dev = device()
    ep_group, edp_group = groups(rank, world)
    torch.manual_seed(rank % EP)  # the same expert on the ranks of its expert-data-parallel group
    expert = torch.nn.Linear(16, 16)
    torch.manual_seed(0)  # the same router on every rank
    model = Layer(ep_group)
    model.expert.load_state_dict(expert.state_dict())
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own tokens
    edp_size = dist.get_world_size(edp_group)
    for step in range(2):
        x = torch.randn(8, 16, generator=data).to(dev)
        loss = model(x).pow(2).mean()
        loss.backward()
        for p in model.router.parameters():  # dense: averaged over every rank
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        for p in model.expert.parameters():  # each expert over the ranks that hold it
            dist.all_reduce(p.grad, group=edp_group)
            p.grad.div_(world if FIX else edp_size)  # the bug: the summing group's size
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.4f, expert weight sum %.6f" % (rank, loss.item(),
                                                          model.expert.weight.sum().item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
