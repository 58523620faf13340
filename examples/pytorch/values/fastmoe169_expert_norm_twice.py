"""laekov/fastmoe #169 ("MoE L2 norm reduce in Megatron"): fastmoe's patch to Megatron's
`clip_grad_norm_fp32` (examples/megatron/clip-grad-v2.2.patch) puts the experts' gradients
(`dp_comm == 'none'`) in a list of their own, all-reduces their squared norm over the model-parallel
group and adds it to the total, which Megatron then all-reduces over the model-parallel group
again: the experts' squares are summed over the same group twice. The maintainers concluded the
patch's reduction belongs to the data-parallel group (across which the experts differ), not the
model-parallel one.

Here, 2 ranks forming one model-parallel group that sees one batch of 6 tokens of width 12, with
the experts spread over it as in fastmoe's earlier versions (expert e on rank e): a LayerNorm and
a gate replicated on both ranks (counted on rank 0 only, Megatron's
param_is_not_tensor_parallel_duplicate), an MLP split as Megatron splits it (counted on every
rank), and each rank's expert output weighted by the gate and all-reduced in the forward. The
data-parallel group of each rank is the rank alone.

The bug: the experts' squared norm is all-reduced over the model-parallel group in the patch and
again with the total: each expert counts twice in the norm (the model-parallel size in general),
so clipping scales by the wrong factor. --fix reduces the patch's sum over the data-parallel
group, as the maintainers concluded.

Ground truth (--check-truth OUT): one process holds the whole model (both experts) and runs the
same batch; torch.nn.utils.clip_grad_norm_ of its gradients is the norm. Bug: the norm counts
the experts' squares 2 times; fix: the norm matches.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
WIDTH, HIDDEN, TOKENS, MAX_NORM = 12, 16, 6, 0.05


class CopyToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def full_weights(world: int):
    torch.manual_seed(0)
    return {"fc1": torch.randn(HIDDEN, WIDTH) * 0.3, "fc2": torch.randn(WIDTH, HIDDEN) * 0.3,
            "gate": torch.randn(world, WIDTH) * 0.3,
            "experts": [torch.randn(WIDTH, WIDTH) * 0.3 for _ in range(world)]}


class Block(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        w = full_weights(world)
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.gate = torch.nn.Parameter(w["gate"])
        self.fc1 = torch.nn.Parameter(w["fc1"].chunk(world)[rank].clone())
        self.fc2 = torch.nn.Parameter(w["fc2"].chunk(world, dim=1)[rank].clone())
        self.expert = torch.nn.Parameter(w["experts"][rank])
        for p in (self.fc1, self.fc2, self.expert):
            p.tensor_model_parallel = True  # split over the model-parallel group: count on each rank
        self.expert.dp_comm = "none"  # fastmoe's mark of an expert: no data-parallel reduction
        self.rank = rank

    def forward(self, x):
        h = CopyToParallel.apply(self.norm(x))
        dense = ReduceFromParallel.apply(F.gelu(h @ self.fc1.t()) @ self.fc2.t())
        score = torch.softmax(h @ self.gate.t(), dim=-1)[:, self.rank:self.rank + 1]
        moe = ReduceFromParallel.apply(score * (h @ self.expert.t()))
        return x + dense + moe


def clip_grad_norm_fp32(parameters, max_norm: float, moe_group) -> torch.Tensor:
    """Megatron's clip_grad_norm_fp32 with fastmoe's patch (the L2 branch)."""
    rank = dist.get_rank()
    grads, grads_for_norm, grads_in_moe = [], [], []
    for param in parameters:
        is_not_tp_duplicate = getattr(param, "tensor_model_parallel", False) or rank == 0
        grads.append(param.grad)
        if is_not_tp_duplicate:
            if getattr(param, "dp_comm", None) == "none":
                grads_in_moe.append(param.grad)
            else:
                grads_for_norm.append(param.grad)
    total_norm = torch.stack([g.norm() ** 2 for g in grads_for_norm]).sum()
    if grads_in_moe:
        grad_norm = torch.stack([g.norm() ** 2 for g in grads_in_moe]).sum()
        dist.all_reduce(grad_norm, group=moe_group)  # the patch (the bug: the model-parallel group)
        total_norm = total_norm + grad_norm
    dist.all_reduce(total_norm)  # Megatron: over the model-parallel group
    total_norm = total_norm.sqrt()
    clip_coeff = max_norm / (total_norm + 1e-6)
    if clip_coeff < 1.0:
        for g in grads:
            g.mul_(clip_coeff)
    return total_norm


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    mp_group = None  # every rank
    dp_groups = [dist.new_group([r]) for r in range(world)]  # each rank alone
    model = Block(rank, world).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(700)  # one batch for the model-parallel group
    for step in range(2):
        x = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        y = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        dist.all_reduce(model.gate.grad)  # each rank's gate gradient covers its own expert
        norm = clip_grad_norm_fp32(model.parameters(), MAX_NORM, dp_groups[rank] if fix else mp_group)
        probe.note("norm", norm.item())
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f, grad norm %.6f" % (rank, loss.item(), norm.item()), flush=True)


def reference(world: int, batch):
    """clip_grad_norm_'s norm of the whole model's gradients, and the experts' part of it."""
    w = full_weights(world)
    norm = torch.nn.LayerNorm(WIDTH).double()
    params = {"fc1": w["fc1"], "fc2": w["fc2"], "gate": w["gate"], "experts": torch.stack(w["experts"])}
    params = {n: v.double().requires_grad_() for n, v in params.items()}
    x, y = batch
    h = norm(x)
    dense = F.gelu(h @ params["fc1"].t()) @ params["fc2"].t()
    score = torch.softmax(h @ params["gate"].t(), dim=-1)
    moe = sum(score[:, e:e + 1] * (h @ params["experts"][e].t()) for e in range(world))
    F.mse_loss(x + dense + moe, y).backward()
    every = list(params.values()) + list(norm.parameters())
    total = float(torch.nn.utils.clip_grad_norm_(every, max_norm=float("inf")))
    return total, float(params["experts"].grad.norm())


def truth(probe: _truth.Probe, fix: bool):
    norms = _truth.gather(probe.notes["norm"][0])
    if dist.get_rank() != 0:
        return None
    ref, experts = reference(len(norms), probe.batches[0])
    counted = (norms[0] ** 2 - ref ** 2) / experts ** 2 + 1  # how many times the experts count
    return {"program": "fastmoe169_expert_norm_twice", "fix": fix, "class": "double_reduction",
            "norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref,
            "norm_ratio": round(norms[0] / ref, 6), "experts_counted": round(counted, 4)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
