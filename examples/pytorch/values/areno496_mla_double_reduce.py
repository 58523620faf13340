"""inclusionAI/AReno PR #496 ("fix(bailing): correct MLA tensor-parallel gradient reduction"):
in multi-head latent attention with tensor parallelism and no sequence parallelism, the replicated
down-projections (q_a, kv_a) and their RMSNorms feed column-parallel up-projections (q_b, kv_b)
whose input boundary already all-reduces the input gradient over the tensor-parallel ranks in the
backward; the training loop then all-reduces the replicated parameters' gradients again. q_a's
and the norms' gradients come out tp_size times too large; kv_a's are wrong in direction, not
only in scale: its compressed rows pass through kv_b and are reduced twice, its RoPE rows bypass
kv_b, stay rank-local, and are reduced once ([2 (c0 + c1), r0 + r1] at TP=2, the PR says). The
fix moves the boundary in front of the down-projections, so every gradient behind it is a
rank-local partial that the loop's all-reduce sums once.

Here, 2 tensor-parallel ranks on one batch of 6 tokens of width 16: q_a 16 -> 8 with its RMSNorm,
kv_a 16 -> 6 compressed + 2 RoPE rows, the compressed rows RMS-normed, q_b and kv_b split by
heads (one head of each on each rank), attention per head with the RoPE key shared by the heads,
the output projection split by input columns and all-reduced in the forward.

The bug: q_a, q_a_norm and kv_a_norm step with 2 times their gradient; kv_a's compressed rows 2
times, its RoPE rows once. --fix puts the boundary on the hidden states.

Ground truth (--check-truth OUT): one process runs both heads and backpropagates the same loss;
each rank's gradients at the first step are compared with it (split weights with their slice,
kv_a's two row blocks separately). Bug: q_a and norms factor 2, kv_a compressed 2 and RoPE 1;
fix: all 1.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
HID, QL, KVL, NOPE, ROPE, VDIM, HEADS, TOKENS = 16, 8, 6, 4, 2, 4, 2, 6


class CopyToParallel(torch.autograd.Function):
    """Identity forward; the input gradient all-reduced over the tensor-parallel ranks."""

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


class RMSNorm(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def full_weights():
    torch.manual_seed(0)
    return {"q_a": torch.randn(QL, HID) * 0.25, "kv_a": torch.randn(KVL + ROPE, HID) * 0.25,
            "q_b": torch.randn(HEADS * (NOPE + ROPE), QL) * 0.35,
            "kv_b": torch.randn(HEADS * (NOPE + VDIM), KVL) * 0.35,
            "o_proj": torch.randn(HID, HEADS * VDIM) * 0.35}


def attention(q, kv, k_rope):
    q_nope, q_rope = q.split([NOPE, ROPE], dim=-1)
    k_nope, v = kv.split([NOPE, VDIM], dim=-1)
    scores = (q_nope @ k_nope.t() + q_rope @ k_rope.t()) / (NOPE + ROPE) ** 0.5
    return torch.softmax(scores, dim=-1) @ v


class MLA(torch.nn.Module):
    def __init__(self, rank: int, world: int, fix: bool) -> None:
        super().__init__()
        w = full_weights()
        heads = HEADS // world
        self.q_a = torch.nn.Parameter(w["q_a"])
        self.q_a_norm = RMSNorm(QL)
        self.kv_a = torch.nn.Parameter(w["kv_a"])
        self.kv_a_norm = RMSNorm(KVL)
        self.q_b = torch.nn.Parameter(w["q_b"].chunk(world)[rank].clone())  # column-parallel
        self.kv_b = torch.nn.Parameter(w["kv_b"].chunk(world)[rank].clone())  # column-parallel
        self.o_proj = torch.nn.Parameter(w["o_proj"].chunk(world, dim=1)[rank].clone())  # row-parallel
        self.heads, self.fix = heads, fix

    def forward(self, x):
        if self.fix:  # the fix: the boundary before the replicated down-projections
            x = CopyToParallel.apply(x)
        q_lat = self.q_a_norm(x @ self.q_a.t())
        kv_lat, k_rope = (x @ self.kv_a.t()).split([KVL, ROPE], dim=-1)
        kv_lat = self.kv_a_norm(kv_lat)
        if not self.fix:  # ColumnParallelLinear's input boundary, behind the replicated ones
            q_lat, kv_lat = CopyToParallel.apply(q_lat), CopyToParallel.apply(kv_lat)
        q = (q_lat @ self.q_b.t()).view(TOKENS, self.heads, NOPE + ROPE)
        kv = (kv_lat @ self.kv_b.t()).view(TOKENS, self.heads, NOPE + VDIM)
        out = torch.cat([attention(q[:, h], kv[:, h], k_rope) for h in range(self.heads)], dim=-1)
        return x + ReduceFromParallel.apply(out @ self.o_proj.t())


REPLICATED = ("q_a", "q_a_norm.weight", "kv_a", "kv_a_norm.weight")


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert HEADS % world == 0, "the ranks must split %d heads evenly" % HEADS
    dev = _truth.device()
    model = MLA(rank, world, fix).to(dev)
    replicated = [p for n, p in model.named_parameters() if n in REPLICATED]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(600)  # tensor-parallel ranks share the batch
    for step in range(2):
        x = torch.randn(TOKENS, HID, generator=data).to(dev)
        y = torch.randn(TOKENS, HID, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in replicated:  # the training manager: replicated parameters summed over TP
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def reference_grads(batch):
    w = {n: v.double().requires_grad_() for n, v in full_weights().items()}
    q_norm, kv_norm = RMSNorm(QL).double(), RMSNorm(KVL).double()
    x, y = batch
    q = q_norm(x @ w["q_a"].t()) @ w["q_b"].t()
    kv_lat, k_rope = (x @ w["kv_a"].t()).split([KVL, ROPE], dim=-1)
    kv = kv_norm(kv_lat) @ w["kv_b"].t()
    q, kv = q.view(TOKENS, HEADS, NOPE + ROPE), kv.view(TOKENS, HEADS, NOPE + VDIM)
    out = torch.cat([attention(q[:, h], kv[:, h], k_rope) for h in range(HEADS)], dim=-1)
    F.mse_loss(x + out @ w["o_proj"].t(), y).backward()
    grads = {n: v.grad for n, v in w.items()}
    grads["q_a_norm.weight"], grads["kv_a_norm.weight"] = q_norm.weight.grad, kv_norm.weight.grad
    return grads


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather(probe.grads)
    if dist.get_rank() != 0:
        return None
    ref, world = reference_grads(probe.batches[0]), len(rows)
    record = {"program": "areno496_mla_double_reduce", "fix": fix, "class": "double_reduction"}
    kinds = {"q_a_and_norms": [], "kv_a_compressed": [], "kv_a_rope": [], "kv_a": [], "split": []}
    for rank, g in enumerate(rows):
        for name in ("q_a", "q_a_norm.weight", "kv_a_norm.weight"):
            kinds["q_a_and_norms"].append(_truth.compare(g[name], ref[name]))
        kinds["kv_a_compressed"].append(_truth.compare(g["kv_a"][:KVL], ref["kv_a"][:KVL]))
        kinds["kv_a_rope"].append(_truth.compare(g["kv_a"][KVL:], ref["kv_a"][KVL:]))
        kinds["kv_a"].append(_truth.compare(g["kv_a"], ref["kv_a"]))
        for name, dim in (("q_b", 0), ("kv_b", 0), ("o_proj", 1)):
            kinds["split"].append(_truth.compare(g[name], ref[name].chunk(world, dim=dim)[rank]))
    record.update({k: _truth.summarize(v) for k, v in kinds.items()})
    return record


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
