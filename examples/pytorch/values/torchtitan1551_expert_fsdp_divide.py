"""pytorch #160285 ("Wrong-size gradients in Expert Parallel MoE": expert gradients exactly 2x
at EP=2), fixed in torchtitan PR #1551 ("fix EP fsdp gradient divide factor"). torchtitan shards
the routed experts with FSDP over the `dp_shard_mod_ep` mesh (the data-parallel ranks divided by
the expert-parallel degree) and everything else over `dp_shard`; FSDP's reduce-scatter averages
over the mesh it was given. An expert's gradient already sums the losses of its expert-parallel
group (all_to_all brought their tokens), so averaging it over `dp_shard_mod_ep` leaves it ep times
too large. The fix sets the experts' gradient divide factor to the `dp_shard` degree.

Here, 4 ranks as torchtitan lays them out for dp_shard=4, ep=2: expert-parallel groups {0, 1} and
{2, 3} (expert e on the ranks with rank % 2 == e), `dp_shard_mod_ep` groups {0, 2} and {1, 3};
token-choice top-1 routing with all_to_all of uneven splits (counts exchanged first, as
torchtitan does); SwiGLU experts stored as torchtitan's GroupedExperts stores them (w1, w2, w3);
a hand-written fully_shard: each module's parameters flattened, the gradient reduce-scattered
and divided, the optimizer stepping the shard, the full parameters all-gathered back.

The bug: the experts' shards are divided by 2, the `dp_shard_mod_ep` size: 2 times the gradient
of the mean loss (the expert-parallel degree in general). --fix divides by 4, `dp_shard`.

This is a divisor, not a second reduction: the first sum is the all_to_all's backward gathering
the expert's tokens from the expert-parallel group, and no reduction sums the result again.

Ground truth (--check-truth OUT): one process runs the router, the projection and both experts
on every rank's 12 tokens and backpropagates the mean of the 4 losses; each rank's shard of the
gradient at the first step is compared with the same slice of the reference. Bug: expert factor
2, dense 1; fix: both 1.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
import torch.nn.functional as F

import _truth

RANKS = 4
EP, DIM, HIDDEN, TOKENS = 2, 8, 12, 12


def reduce_scatter(flat, group):
    """FSDP's reduce-scatter (sum). Gloo has none in torch 1.13: all-reduce, keep this shard."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if dist.get_backend(group) == "nccl":
        out = flat.new_empty(flat.numel() // size)
        dist.reduce_scatter_tensor(out, flat, group=group)
        return out
    dist.all_reduce(flat, group=group)
    return flat.chunk(size)[rank].clone()


class FullyShard:
    """A module's parameters sharded over `group`: gradients reduce-scattered and divided by
    `gradient_divide_factor` (by default the group's size: an average), parameters all-gathered
    after the optimizer steps the shard."""

    def __init__(self, module, group, gradient_divide_factor=None):
        self.params = list(module.parameters())
        self.group = group
        self.size = dist.get_world_size(group)
        self.divide = gradient_divide_factor or self.size
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        pad = -flat.numel() % self.size
        self.flat = torch.cat([flat, flat.new_zeros(pad)])
        self.shard = torch.nn.Parameter(self.flat.chunk(self.size)[dist.get_rank(group)].clone())

    def reduce_grad(self):
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        grad = torch.cat([grad, grad.new_zeros(self.flat.numel() - grad.numel())])
        self.shard.grad = reduce_scatter(grad, self.group).div_(self.divide)
        for p in self.params:
            p.grad = None

    def unshard(self):
        parts = [torch.empty_like(self.shard) for _ in range(self.size)]
        dist.all_gather(parts, self.shard.detach(), group=self.group)
        full = torch.cat(parts)
        with torch.no_grad():
            for p, v in zip(self.params, full.split([p.numel() for p in self.params])):
                p.copy_(v.view_as(p))


class GroupedExperts(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        torch.manual_seed(20 + index)
        self.w1 = torch.nn.Parameter(torch.randn(1, DIM, HIDDEN) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(1, HIDDEN, DIM) * 0.3)
        self.w3 = torch.nn.Parameter(torch.randn(1, DIM, HIDDEN) * 0.3)

    def forward(self, x):
        return (F.silu(x @ self.w1[0]) * (x @ self.w3[0])) @ self.w2[0]


class MoE(torch.nn.Module):
    def __init__(self, rank: int, ep_group) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.gate = torch.nn.Linear(DIM, EP, bias=False)
        self.experts = GroupedExperts(rank % EP)
        self.ep_group = ep_group

    def forward(self, x):
        h = self.proj(x)
        probs = torch.softmax(self.gate(h), dim=-1)
        score, chosen = probs.max(dim=-1)  # top-1
        order = torch.argsort(chosen, stable=True)
        counts = torch.bincount(chosen, minlength=EP)
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts, group=self.ep_group)
        send, recv = counts.tolist(), received.tolist()
        tokens = dfn.all_to_all_single(h.new_empty(sum(recv), DIM), h[order], recv, send, group=self.ep_group)
        done = self.experts(tokens)
        back = dfn.all_to_all_single(h.new_empty(TOKENS, DIM), done, send, recv, group=self.ep_group)
        out = torch.zeros_like(h).index_add(0, order, back * score[order].unsqueeze(1))
        return x + out


def groups(rank: int, world: int):
    ep = mod_ep = None
    for first in range(0, world, EP):
        g = dist.new_group(list(range(first, first + EP)))
        ep = g if first <= rank < first + EP else ep
    for e in range(EP):
        g = dist.new_group(list(range(e, world, EP)))
        mod_ep = g if rank % EP == e else mod_ep
    return ep, mod_ep


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % EP == 0 and world > EP, "run with 4 ranks"
    dev = _truth.device()
    ep_group, dp_shard_mod_ep = groups(rank, world)
    model = MoE(rank, ep_group).to(dev)
    dp_shard = world
    experts = FullyShard(model.experts, dp_shard_mod_ep, dp_shard if fix else None)  # the fix
    dense = FullyShard(torch.nn.ModuleList([model.proj, model.gate]), None)  # averaged over dp_shard
    opt = torch.optim.SGD([experts.shard, dense.shard], lr=0.1)
    probe.watch(opt, [("experts", experts.shard), ("dense", dense.shard)])
    data = torch.Generator().manual_seed(300 + rank)
    for step in range(2):
        x = torch.randn(TOKENS, DIM, generator=data).to(dev)
        y = torch.randn(TOKENS, DIM, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        experts.reduce_grad()
        dense.reduce_grad()
        opt.step()
        opt.zero_grad()
        experts.unshard()
        dense.unshard()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def reference_grads(batches):
    """Flat gradients of the dense modules and of each expert, in FullyShard's order, from the
    seeds every rank drew its initial weights from (each rank holds only a shard of them)."""
    torch.manual_seed(0)
    proj, gate = torch.nn.Linear(DIM, DIM).double(), torch.nn.Linear(DIM, EP, bias=False).double()
    dense = list(proj.parameters()) + list(gate.parameters())
    experts = [GroupedExperts(e).double() for e in range(EP)]
    losses = []
    for x, y in batches:
        h = proj(x)
        probs = torch.softmax(gate(h), dim=-1)
        score, chosen = probs.max(dim=-1)
        out = torch.zeros_like(h)
        for e, ex in enumerate(experts):
            rows = (chosen == e).nonzero().flatten()
            out = out.index_add(0, rows, ex(h[rows]) * score[rows].unsqueeze(1))
        losses.append(F.mse_loss(x + out, y))
    torch.stack(losses).mean().backward()
    flat = lambda ps: torch.cat([p.grad.reshape(-1) for p in ps])  # noqa: E731
    return flat(dense), [flat(list(ex.parameters())) for ex in experts]


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    world = len(rows)
    dense_ref, expert_refs = reference_grads([r["batch"] for r in rows])
    dense, expert = [], []
    for rank, row in enumerate(rows):
        d = dense_ref.numel() + (-dense_ref.numel() % world)
        ref = torch.cat([dense_ref, dense_ref.new_zeros(d - dense_ref.numel())]).chunk(world)[rank]
        dense.append(_truth.compare(row["grads"]["dense"], ref))
        e_ref = expert_refs[rank % EP]
        size = world // EP
        n = e_ref.numel() + (-e_ref.numel() % size)
        ref = torch.cat([e_ref, e_ref.new_zeros(n - e_ref.numel())]).chunk(size)[rank // EP]
        expert.append(_truth.compare(row["grads"]["experts"], ref))
    return {"program": "torchtitan1551_expert_fsdp_divide", "fix": fix, "class": "divisor_mismatch",
            "dense": _truth.summarize(dense), "expert": _truth.summarize(expert)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
