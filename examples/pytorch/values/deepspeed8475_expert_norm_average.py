"""DeepSpeed #8475 (first filed as #8469, "AutoEP FP32 gradient clipping averages norms across
ranks with different expert ownership"; fix proposed in PR #8478, "Count each expert once in the
fp32 gradient-clipping norm"): `clip_grad_norm_` in deepspeed/runtime/utils.py takes each rank's
norm and averages it over the data-parallel group (`total_norm / world_size`, then all_reduce),
which is the global norm only while every rank holds the same parameters. Under AutoEP the ranks
own different experts: PR #8478 measured 7.236 (sqrt(20) and sqrt(100) averaged) against
10.954 (sqrt(120)) for four expert gradients on two ranks.

Here, 2 ranks with expert parallelism over both (expert e on rank e, a SwiGLU expert of width 8
and hidden 20), a router and an input projection replicated and averaged as ZeRO-0 averages
them, expert-choice routing with all_to_all, the experts' gradients divided by the
data-parallel size (as DeepSpeed scales them since PR #6546); clipping to 0.05.

The bug: the norm is the mean of the ranks' norms, each over the dense parameters and its own
expert: the experts are undercounted and clipping is weaker than it should be. --fix sums the
squares weighted by ownership (a replicated parameter's squares divided by the ranks that hold
it, an expert's once) over the ranks and takes the square root.

Ground truth (--check-truth OUT): one process runs both experts on both ranks' tokens and
backpropagates the mean loss; torch.nn.utils.clip_grad_norm_ of its gradients is the norm. Bug:
the norm is below it; fix: the norm matches.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
import torch.nn.functional as F

import _truth

RANKS = 2
DIM, FFN, TOKENS, CAPACITY, MAX_NORM = 8, 20, 9, 4, 0.05


class SwiGLUExpert(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        torch.manual_seed(40 + index)
        self.gate_up = torch.nn.Parameter(torch.randn(2 * FFN, DIM) * 0.1)
        self.down = torch.nn.Parameter(torch.randn(DIM, FFN) * 0.1)

    def forward(self, x):
        gate, up = (x @ self.gate_up.t()).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.down.t()


class AutoEPLayer(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(DIM, DIM)
        with torch.no_grad():
            self.proj.weight.mul_(4.0)
        self.router = torch.nn.Linear(DIM, world, bias=False)
        self.expert = SwiGLUExpert(rank)
        for p in self.expert.parameters():
            p.allreduce = False  # DeepSpeed's mark of an expert parameter

    def forward(self, x):
        h = self.proj(x)
        gate = torch.softmax(self.router(h), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)
        rows = picked.t().reshape(-1)
        tokens = dfn.all_to_all_single(torch.empty_like(h[rows]), h[rows])
        done = self.expert(tokens)
        back = dfn.all_to_all_single(torch.empty_like(done), done)
        return torch.zeros_like(h).index_add(0, rows, back * score.t().reshape(-1, 1))


def clip_grad_norm_(parameters, max_norm: float, fix: bool) -> float:
    """deepspeed.runtime.utils.clip_grad_norm_ (L2, mpu=None)."""
    parameters = [p for p in parameters if p.grad is not None]
    world = dist.get_world_size()
    if fix:  # the fix: ownership-weighted squares, summed over the ranks
        total = sum(p.grad.float().norm() ** 2 / (1 if not getattr(p, "allreduce", True) else world)
                    for p in parameters)
        dist.all_reduce(total)
        total_norm = float(total.sqrt())
    else:
        total_norm = sum(p.grad.float().norm().item() ** 2 for p in parameters) ** 0.5
        scaled_norm = torch.tensor([total_norm / world], device=parameters[0].device)
        dist.all_reduce(scaled_norm)  # the bug: the mean of the ranks' norms
        total_norm = scaled_norm.item()
    clip_coef = max_norm / (total_norm + 1e-6)
    if clip_coef < 1:
        for p in parameters:
            p.grad.mul_(clip_coef)
    return total_norm


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = AutoEPLayer(rank, world).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(1700 + rank)
    for step in range(2):
        x = torch.randn(TOKENS, DIM, generator=data).to(dev)
        y = torch.randn(TOKENS, DIM, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            if getattr(p, "allreduce", True):
                dist.all_reduce(p.grad)
            p.grad.div_(world)  # dense: the average; experts: scaled by the data-parallel size
        norm = clip_grad_norm_(model.parameters(), MAX_NORM, fix)
        probe.note("norm", norm)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f, grad norm %.6f" % (rank, loss.item(), norm), flush=True)


def reference_norm(batches) -> float:
    world = len(batches)
    torch.manual_seed(0)
    proj, router = torch.nn.Linear(DIM, DIM).double(), torch.nn.Linear(DIM, world, bias=False).double()
    with torch.no_grad():
        proj.weight.mul_(4.0)
    experts = [SwiGLUExpert(e).double() for e in range(world)]
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
    params = list(proj.parameters()) + list(router.parameters()) + [p for e in experts for p in e.parameters()]
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf")))


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"norm": probe.notes["norm"][0], "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    ref = reference_norm([r["batch"] for r in rows])
    norms = [r["norm"] for r in rows]
    return {"program": "deepspeed8475_expert_norm_average", "fix": fix, "class": "grad_norm_miscount",
            "norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref,
            "norm_ratio": round(norms[0] / ref, 6)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
