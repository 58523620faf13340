"""NVIDIA-NeMo/Automodel #3816 ("grad clipping computes a different 'global' norm on every EP
group with TE experts"; fix proposed in PR #3817, "reduce grad-clip norms across the
expert-parallel axis"): the TE experts' parameters are plain tensors, so the clipping code, which
reduces each parameter's norm over the mesh it can see on it, never adds the experts' part of the
norm up across the expert-parallel axis. Each expert-parallel rank computes its own "global" norm
and clips the dense parameters, which every rank shares, by its own factor: "the shared weights
slowly drift apart between groups" (the issue's repro: norms 40.2 and 4.0 on two ranks, the same
dense gradient clipped 10x differently).

Here, 2 ranks, one expert each (expert parallelism over both); dense parameters (an input
projection and the router) replicated on both and their gradients averaged (Automodel shards them
with FSDP; replicated here, so the shared weights are whole copies); expert-choice routing with
all_to_all; the experts' gradients scaled by 1 / ep as Automodel scales them; clipping to 0.05,
active on every step.

The bug: each rank's norm counts its own expert only: the ranks clip the same dense gradients by
different factors and the dense copies drift apart from the first step. --fix all-reduces the
experts' squared norm over the expert-parallel ranks before the square root.

Ground truth (--check-truth OUT): the norm each rank computed; one process running both experts
on both ranks' tokens gives the reference norm (torch.nn.utils.clip_grad_norm_ of the gradients of
the mean loss); the dense parameters are compared across the ranks after the last step. Bug:
the norms differ across the ranks and from the reference, the dense copies differ; fix: every
rank's norm is the reference's and the copies are bit for bit the same.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
import torch.nn.functional as F

import _truth

RANKS = 2
DIM, TOKENS, CAPACITY, MAX_NORM = 14, 6, 3, 0.05


class GroupedExpertsTE(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        torch.manual_seed(30 + index)
        self.weight = torch.nn.Parameter(torch.randn(DIM, DIM) * 0.1)  # a plain tensor

    def forward(self, x):
        return x @ self.weight


class MoEModel(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.router = torch.nn.Linear(DIM, world, bias=False)
        self.experts = GroupedExpertsTE(rank)

    def forward(self, x):
        h = self.proj(x)
        gate = torch.softmax(self.router(h), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)
        rows = picked.t().reshape(-1)
        tokens = dfn.all_to_all_single(torch.empty_like(h[rows]), h[rows])
        done = self.experts(tokens)
        back = dfn.all_to_all_single(torch.empty_like(done), done)
        return torch.zeros_like(h).index_add(0, rows, back * score.t().reshape(-1, 1))


def scale_grads_and_clip_grad_norm(model, max_norm: float, fix: bool) -> torch.Tensor:
    """The dense parameters are the same on every rank: their norm is local. The experts' part
    is each rank's own expert."""
    dense = [p.grad for n, p in model.named_parameters() if not n.startswith("experts.")]
    experts = [p.grad for p in model.experts.parameters()]
    dense_sq = torch.stack([g.pow(2).sum() for g in dense]).sum()
    expert_sq = torch.stack([g.pow(2).sum() for g in experts]).sum()
    if fix:  # the fix: the experts' part summed over the expert-parallel ranks
        dist.all_reduce(expert_sq)
    total_norm = (dense_sq + expert_sq).sqrt()
    coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for g in dense + experts:
        g.mul_(coef)
    return total_norm


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = MoEModel(rank, world).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(1200 + rank)
    for step in range(2):
        x = torch.randn(TOKENS, DIM, generator=data).to(dev)
        y = torch.randn(TOKENS, DIM, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for n, p in model.named_parameters():
            if n.startswith("experts."):
                p.grad.div_(world)  # expert-parallel gradient scaling: 1 / ep
            else:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        norm = scale_grads_and_clip_grad_norm(model, MAX_NORM, fix)
        probe.note("norm", norm.item())
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f, grad norm %.6f" % (rank, loss.item(), norm.item()), flush=True)


def reference_norm(initials, batches) -> float:
    world = len(initials)
    torch.manual_seed(0)
    proj, router = torch.nn.Linear(DIM, DIM).double(), torch.nn.Linear(DIM, world, bias=False).double()
    experts = [GroupedExpertsTE(e).double() for e in range(world)]
    losses = []
    for x, y in batches:
        h = proj(x)
        gate = torch.softmax(router(h), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)
        out = torch.zeros_like(h)
        for e, ex in enumerate(experts):
            out = out.index_add(0, picked[:, e], ex(h[picked[:, e]]) * score[:, e:e + 1])
        losses.append(F.mse_loss(out, y))
    torch.stack(losses).mean().backward()
    params = list(proj.parameters()) + list(router.parameters())
    params += [p for ex in experts for p in ex.parameters()]
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf")))


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"norm": probe.notes["norm"][0], "initial": probe.initial,
                          "batch": probe.batches[0], "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    ref = reference_norm([r["initial"] for r in rows], [r["batch"] for r in rows])
    dense = [n for n in rows[0]["after"] if not n.startswith("experts.")]
    return {"program": "automodel3816_ep_clip", "fix": fix, "class": "replica_divergence",
            "norm_by_rank": [r["norm"] for r in rows], "reference_norm": ref,
            "norm_ratio_by_rank": [round(r["norm"] / ref, 6) for r in rows],
            "dense_param_spread": max(_truth.replica_spread([r["after"][n] for r in rows]) for n in dense)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
