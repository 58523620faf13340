"""NVIDIA-NeMo/RL PR #3788 ("fix(dtensor): count TP-replicated gradients once in get_grad_norm"):
the DTensor policy's `get_grad_norm` summed every parameter's local squared gradient and applied
one SUM over the tensor-parallel group to all of them, whatever their placement. Qwen3's q_norm
and k_norm are replicated over the tensor-parallel ranks (the model's TP plan calls them
`replicated_with_grad_allreduce`: their gradients are all-reduced, so every rank holds the whole
one), and the SUM counts them tp_size times. The same mechanism inflated the norm 1.36-1.52 times
in ROCm/TransformerEngine PR #715 (replicated weights marked tensor-parallel).

Here, 2 tensor-parallel ranks on one batch of 5 tokens of width 10: Qwen3-style attention with
q, k and v projections split by heads (4 heads of 4, 2 on each rank), RMSNorms over each head's
queries and keys (q_norm, k_norm) replicated on both ranks and their gradients all-reduced after
the backward, the output projection split by input columns and all-reduced in the forward;
clipping to 0.05.

The bug: the norm's SUM over the ranks counts q_norm's and k_norm's squares twice (tp_size times
in general). --fix adds the replicated parameters' squares once, outside the SUM.

Ground truth (--check-truth OUT): one process runs all 4 heads on the batch;
torch.nn.utils.clip_grad_norm_ of its gradients is the norm. Bug: the replicated norms count 2
times; fix: the norm matches.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
HIDDEN, HEADS, HEAD_DIM, TOKENS, MAX_NORM = 10, 4, 4, 5, 0.05


class ReduceFromParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def full_weights():
    torch.manual_seed(0)
    w = {n: torch.randn(HEADS * HEAD_DIM, HIDDEN) * 0.4 for n in ("q_proj", "k_proj", "v_proj")}
    w["o_proj"] = torch.randn(HIDDEN, HEADS * HEAD_DIM) * 0.4
    return w


def attend(x, q, k, v, q_norm, k_norm, heads: int):
    shape = (TOKENS, heads, HEAD_DIM)
    q, k, v = q_norm(q.view(shape)), k_norm(k.view(shape)), v.view(shape)
    scores = torch.einsum("thd,shd->hts", q, k) / HEAD_DIM ** 0.5
    return torch.einsum("hts,shd->thd", torch.softmax(scores, dim=-1), v).reshape(TOKENS, heads * HEAD_DIM)


class Qwen3Attention(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        w = full_weights()
        for n in ("q_proj", "k_proj", "v_proj"):  # colwise
            setattr(self, n, torch.nn.Parameter(w[n].chunk(world)[rank].clone()))
        self.o_proj = torch.nn.Parameter(w["o_proj"].chunk(world, dim=1)[rank].clone())  # rowwise
        self.q_norm, self.k_norm = RMSNorm(HEAD_DIM), RMSNorm(HEAD_DIM)  # replicated_with_grad_allreduce
        self.heads = HEADS // world

    def forward(self, x):
        out = attend(x, x @ self.q_proj.t(), x @ self.k_proj.t(), x @ self.v_proj.t(),
                     self.q_norm, self.k_norm, self.heads)
        return x + ReduceFromParallel.apply(out @ self.o_proj.t())


REPLICATED = ("q_norm.weight", "k_norm.weight")


def get_grad_norm(model, fix: bool) -> torch.Tensor:
    sharded = [p.grad for n, p in model.named_parameters() if n not in REPLICATED]
    replicated = [p.grad for n, p in model.named_parameters() if n in REPLICATED]
    if not fix:  # the bug: every local gradient goes into the SUM over the tensor-parallel group
        sharded, replicated = sharded + replicated, []
    total = torch.stack([g.pow(2).sum() for g in sharded]).sum()
    dist.all_reduce(total)
    if replicated:  # the fix: the whole gradient every rank holds, counted once
        total = total + torch.stack([g.pow(2).sum() for g in replicated]).sum()
    return total.sqrt()


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert HEADS % world == 0, "the ranks must split %d heads evenly" % HEADS
    dev = _truth.device()
    model = Qwen3Attention(rank, world).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(1600)  # tensor-parallel ranks share the batch
    for step in range(2):
        x = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
        y = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for n, p in model.named_parameters():
            if n in REPLICATED:  # each rank's heads' share, summed: the whole gradient
                dist.all_reduce(p.grad)
        norm = get_grad_norm(model, fix)
        probe.note("norm", norm.item())
        coef = torch.clamp(MAX_NORM / (norm + 1e-6), max=1.0)
        for p in model.parameters():
            p.grad.mul_(coef)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f, grad norm %.6f" % (rank, loss.item(), norm.item()), flush=True)


def reference(batch):
    w = {n: v.double().requires_grad_() for n, v in full_weights().items()}
    q_norm, k_norm = RMSNorm(HEAD_DIM).double(), RMSNorm(HEAD_DIM).double()
    x, y = batch
    out = attend(x, x @ w["q_proj"].t(), x @ w["k_proj"].t(), x @ w["v_proj"].t(), q_norm, k_norm, HEADS)
    F.mse_loss(x + out @ w["o_proj"].t(), y).backward()
    replicated = list(q_norm.parameters()) + list(k_norm.parameters())
    total = float(torch.nn.utils.clip_grad_norm_(list(w.values()) + replicated, max_norm=float("inf")))
    return total, float(torch.cat([p.grad for p in replicated]).norm())


def truth(probe: _truth.Probe, fix: bool):
    norms = _truth.gather(probe.notes["norm"][0])
    if dist.get_rank() != 0:
        return None
    ref, replicated = reference(probe.batches[0])
    return {"program": "nemorl3788_tp_replicated_norm", "fix": fix, "class": "grad_norm_miscount",
            "norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref,
            "norm_ratio": round(norms[0] / ref, 6),
            "replicated_counted": round((norms[0] ** 2 - ref ** 2) / replicated ** 2 + 1, 4)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
