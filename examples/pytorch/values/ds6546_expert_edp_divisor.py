"""DeepSpeed PR #6546 ("Fix expert grad scaling problem with ZeRO optimizer", fixes #6545):
ZeRO-1/2's `average_tensor` divided the gradients of expert parameters by the size of their
expert-data-parallel group; the fix divides them by the data-parallel world size, as it divides
the dense ones.

Why the world size is right: with all_to_all routing an expert's local gradient already carries
the losses of every rank of its expert-parallel group (their tokens came to it), so summing it
over the expert-data-parallel group sums the losses of all the world's ranks, once each. The
gradient of the mean loss over the global batch is that sum divided by the world size.

Here, 4 ranks: expert-parallel groups {0, 1} and {2, 3}, expert-data-parallel groups {0, 2} and
{1, 3} (expert 0 on ranks 0 and 2, expert 1 on ranks 1 and 3); a router replicated on every
rank; expert-choice routing (each expert takes its best 3 of every rank's 10 tokens). The
gradients go through two flat buckets as in ZeRO: the dense one divided by 4 and all-reduced
over the world, the expert one (parameters marked `allreduce = False`, as DeepSpeed marks them)
divided and all-reduced over the expert-data-parallel group.

The bug: the expert bucket is divided by 2, the expert-data-parallel size: expert gradients are
2 times the gradient of the mean loss (ep_size times in general), the same on both replicas, so
nothing diverges. --fix divides by the world size.

Ground truth (--check-truth OUT): one process runs the same router and both experts on each
rank's 10 tokens and backpropagates the mean of the 4 ranks' losses; every rank's gradient at
the first step is compared with it. Bug: expert factor 2, dense factor 1; fix: both 1.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
import torch.nn.functional as F

import _truth

RANKS = 4
EP, WIDTH, HIDDEN, TOKENS, CAPACITY = 2, 12, 20, 10, 3


class Expert(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        torch.manual_seed(10 + index)  # expert e is the same on every rank that holds it
        self.w1 = torch.nn.Linear(WIDTH, HIDDEN)
        self.w2 = torch.nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class MoELayer(torch.nn.Module):
    def __init__(self, rank: int, ep_group) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(WIDTH, EP)
        self.expert = Expert(rank % EP)
        for p in self.expert.parameters():
            p.allreduce = False  # DeepSpeed's mark of an expert parameter
        self.ep_group = ep_group

    def forward(self, x):
        gate = torch.softmax(self.router(x), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)  # each expert's best tokens
        rows = picked.t().reshape(-1)  # expert 0's tokens, then expert 1's
        tokens = dfn.all_to_all_single(torch.empty_like(x[rows]), x[rows], group=self.ep_group)
        done = self.expert(tokens)
        back = dfn.all_to_all_single(torch.empty_like(done), done, group=self.ep_group)
        return torch.zeros_like(x).index_add(0, rows, back * score.t().reshape(-1, 1))


def groups(rank: int, world: int):
    ep = edp = None
    for first in range(0, world, EP):
        g = dist.new_group(list(range(first, first + EP)))
        ep = g if first <= rank < first + EP else ep
    for e in range(EP):
        g = dist.new_group(list(range(e, world, EP)))
        edp = g if rank % EP == e else edp
    return ep, edp


def average_tensor(params, divisor: float, group) -> None:
    """ZeRO's bucket reduction: one flat buffer, divided, then summed over the group."""
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    flat.div_(divisor)
    dist.all_reduce(flat, group=group)
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p))


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % EP == 0 and world > EP, "run with 4 ranks (a multiple of %d, more than it)" % EP
    ep_group, edp_group = groups(rank, world)
    dev = _truth.device()
    model = MoELayer(rank, ep_group).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.watch(opt, model.named_parameters())
    dense = [p for p in model.parameters() if getattr(p, "allreduce", True)]
    experts = [p for p in model.parameters() if not getattr(p, "allreduce", True)]
    dp_world_size = dist.get_world_size()
    edp_world_size = dist.get_world_size(group=edp_group)
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(2):
        x = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        y = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        average_tensor(dense, dp_world_size, group=None)
        average_tensor(experts, dp_world_size if fix else edp_world_size, group=edp_group)  # the bug
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def part(initial, prefix: str):
    return {k[len(prefix):]: v for k, v in initial.items() if k.startswith(prefix)}


def reference_grads(initials, batches):
    """The gradient of the mean loss over every rank's first batch, on one process, from the
    initial weights of rank 0's router and of the ranks that hold expert 0 and expert 1."""
    router = torch.nn.Linear(WIDTH, EP).double()
    router.load_state_dict(part(initials[0], "router."))
    experts = [Expert(e).double() for e in range(EP)]
    for e, expert in enumerate(experts):
        expert.load_state_dict(part(initials[e], "expert."))
    losses = []
    for x, y in batches:
        gate = torch.softmax(router(x), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)
        out = torch.zeros_like(x)
        for e, expert in enumerate(experts):
            out = out.index_add(0, picked[:, e], expert(x[picked[:, e]]) * score[:, e:e + 1])
        losses.append(F.mse_loss(out, y))
    torch.stack(losses).mean().backward()
    grads = {"router." + n: p.grad for n, p in router.named_parameters()}
    for e, expert in enumerate(experts):
        grads.update({"expert%d.%s" % (e, n): p.grad for n, p in expert.named_parameters()})
    return grads


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial, "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    ref = reference_grads([r["initial"] for r in rows], [r["batch"] for r in rows])
    dense, expert = [], []
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            if name.startswith("router."):
                dense.append(_truth.compare(g, ref[name]))
            else:
                expert.append(_truth.compare(g, ref["expert%d.%s" % (rank % EP, name[len("expert."):])]))
    return {"program": "ds6546_expert_edp_divisor", "fix": fix, "class": "divisor_mismatch",
            "dense": _truth.summarize(dense), "expert": _truth.summarize(expert)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
