"""ByteDance-Seed/VeOmni PR #862 ("[dist] fix: correct FSDP2 grad norm reduction"): "Under HSDP,
reduce shard-local norm statistics over the dp_shard group instead of the full FSDP group. Each
shard group is replicated across dp_replicate, so reducing over the full group over-counts the
norm." After HSDP's reduction every replica group holds the same shards; summing the shards'
squares over all the ranks counts each shard once per replica.

Here, 4 ranks as HSDP lays them out for replicate=2, shard=2: shard groups {0, 1} and {2, 3},
replicate groups {0, 2} and {1, 3}; an MLP (9 -> 15, GELU, LayerNorm, 15 -> 4) flattened and
sharded over the shard group by a hand-written fully_shard: gradients reduce-scattered
(averaged) over the shard group, then all-reduced (averaged) over the replicate group; each rank
its own batch; clipping to 0.2.

The bug: the squared norm of each rank's shard is all-reduced over all 4 ranks: every shard
counts twice (dp_replicate times), the norm is sqrt(2) too large and clipping too strong. --fix
reduces over the shard group.

Ground truth (--check-truth OUT): one process runs the MLP on the 4 ranks' batches and
backpropagates the mean loss; torch.nn.utils.clip_grad_norm_ of its gradients is the norm. Bug:
the norm is sqrt(2) times the reference's; fix: it matches.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 4
IN, HIDDEN, OUT, BATCH, SHARD, MAX_NORM = 9, 15, 4, 6, 2, 0.2


def reduce_scatter(flat, group):
    """Reduce-scatter (sum); gloo in torch 1.13 has none: all-reduce, keep this rank's shard."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if dist.get_backend(group) == "nccl":
        out = flat.new_empty(flat.numel() // size)
        dist.reduce_scatter_tensor(out, flat, group=group)
        return out
    dist.all_reduce(flat, group=group)
    return flat.chunk(size)[rank].clone()


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.GELU(), torch.nn.LayerNorm(HIDDEN),
                               torch.nn.Linear(HIDDEN, OUT))


class HybridShard:
    def __init__(self, module, shard_group, replicate_group) -> None:
        self.params = list(module.parameters())
        self.shard_group, self.replicate_group = shard_group, replicate_group
        self.size = dist.get_world_size(shard_group)
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.numel = flat.numel()
        flat = torch.cat([flat, flat.new_zeros(-flat.numel() % self.size)])
        self.shard = torch.nn.Parameter(flat.chunk(self.size)[dist.get_rank(shard_group)].clone())

    def reduce_grad(self) -> None:
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        grad = torch.cat([grad, grad.new_zeros(-grad.numel() % self.size)])
        grad = reduce_scatter(grad, self.shard_group).div_(self.size)
        dist.all_reduce(grad, group=self.replicate_group)
        self.shard.grad = grad.div_(dist.get_world_size(self.replicate_group))
        for p in self.params:
            p.grad = None

    def unshard(self) -> None:
        parts = [torch.empty_like(self.shard) for _ in range(self.size)]
        dist.all_gather(parts, self.shard.detach(), group=self.shard_group)
        full = torch.cat(parts)[:self.numel]
        with torch.no_grad():
            for p, v in zip(self.params, full.split([p.numel() for p in self.params])):
                p.copy_(v.view_as(p))


def clip_grad_norm(shards, max_norm: float, group) -> torch.Tensor:
    total = torch.stack([s.grad.pow(2).sum() for s in shards]).sum()
    dist.all_reduce(total, group=group)
    total = total.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for s in shards:
        s.grad.mul_(coef)
    return total


def groups(rank: int, world: int):
    shard = replicate = None
    for first in range(0, world, SHARD):
        g = dist.new_group(list(range(first, first + SHARD)))
        shard = g if first <= rank < first + SHARD else shard
    for i in range(SHARD):
        g = dist.new_group(list(range(i, world, SHARD)))
        replicate = g if rank % SHARD == i else replicate
    return shard, replicate


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world % SHARD == 0 and world > SHARD, "run with 4 ranks"
    dev = _truth.device()
    shard_group, replicate_group = groups(rank, world)
    model = make_model().to(dev)
    fsdp = HybridShard(model, shard_group, replicate_group)
    opt = torch.optim.SGD([fsdp.shard], lr=0.5)
    probe.watch(opt, [("shard", fsdp.shard)])
    data = torch.Generator().manual_seed(1800 + rank)
    for step in range(2):
        x = torch.randn(BATCH, IN, generator=data).to(dev)
        y = torch.randn(BATCH, OUT, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        fsdp.reduce_grad()
        norm = clip_grad_norm([fsdp.shard], MAX_NORM, shard_group if fix else None)  # the bug: all ranks
        probe.note("norm", norm.item())
        opt.step()
        opt.zero_grad()
        fsdp.unshard()
    print("rank %d: loss %.5f, grad norm %.6f" % (rank, loss.item(), norm.item()), flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"norm": probe.notes["norm"][0], "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    model = make_model().double()
    torch.stack([F.mse_loss(model(r["batch"][0]), r["batch"][1]) for r in rows]).mean().backward()
    ref = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf")))
    norms = [r["norm"] for r in rows]
    return {"program": "veomni862_hsdp_norm", "fix": fix, "class": "grad_norm_miscount",
            "norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref,
            "norm_ratio": round(norms[0] / ref, 6)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
