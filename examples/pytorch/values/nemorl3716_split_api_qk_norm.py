"""NVIDIA-NeMo/RL #3716 ("Split-API train step misses the TP grad all-reduce for replicated params
(qk-layernorm / SP layernorms)"): the split train-step API (begin_train_step, train_microbatch per
microbatch, finish_train_step) takes Megatron's finalize step out of the pipeline schedule so
that it can run once per step, and finish_train_step runs the data-parallel gradient sync but not
the all-reduce over the tensor-parallel ranks of the parameters every tensor-parallel rank holds
whole. With qk-layernorm those norms act on each rank's own heads, so their gradients are
partial sums: the synchronous train() reduces them, the split API steps with them as they are.

Here, 2 tensor-parallel ranks (data-parallel size 1) on batches of 4 tokens of width 12, two
microbatches a step: grouped-query attention with 4 query heads and 2 key/value groups of 3
channels split over the ranks (2 query heads and 1 group each), RMSNorms over each head's
queries and keys (q_layernorm, k_layernorm, weights ones at start) on both ranks, the output
projection split by input columns and all-reduced in the forward.

The bug: finish_train_step never all-reduces q_layernorm's and k_layernorm's gradients over the
tensor-parallel ranks: each rank steps its copy with its own heads' share and the copies drift
apart. --fix runs that all-reduce (Megatron's finalize_model_grads step for parameters that are
not tensor-parallel) in finish_train_step.

Ground truth (--check-truth OUT): one process runs all heads on both microbatches; each rank's
gradients at the first step are compared with it (split weights with their slice), and the norms'
copies are compared across the ranks after the last step. Bug: the norms' gradients do not match
(large residual) and their copies differ; fix: everything matches, copies bit for bit the same.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
HIDDEN, HEADS, GROUPS, CHANNELS, TOKENS, MICROBATCHES = 12, 4, 2, 3, 4, 2


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
    return {"linear_q": torch.randn(HEADS * CHANNELS, HIDDEN) * 0.5,
            "linear_kv": torch.randn(GROUPS * 2 * CHANNELS, HIDDEN) * 0.5,
            "linear_proj": torch.randn(HIDDEN, HEADS * CHANNELS) * 0.5}


def attention(x, q, kv, q_norm, k_norm, heads: int, groups: int):
    q = q_norm(q.view(TOKENS, heads, CHANNELS))
    k, v = kv.view(TOKENS, groups, 2, CHANNELS).unbind(2)
    k = k_norm(k).repeat_interleave(heads // groups, dim=1)
    v = v.repeat_interleave(heads // groups, dim=1)
    probs = torch.softmax(torch.einsum("thc,shc->hts", q, k) / CHANNELS ** 0.5, dim=-1)
    return torch.einsum("hts,shc->thc", probs, v).reshape(TOKENS, heads * CHANNELS)


class SelfAttention(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        w = full_weights()
        self.linear_q = torch.nn.Parameter(w["linear_q"].chunk(world)[rank].clone())
        self.linear_kv = torch.nn.Parameter(w["linear_kv"].chunk(world)[rank].clone())
        self.linear_proj = torch.nn.Parameter(w["linear_proj"].chunk(world, dim=1)[rank].clone())
        self.q_layernorm, self.k_layernorm = RMSNorm(CHANNELS), RMSNorm(CHANNELS)
        for p in (self.linear_q, self.linear_kv, self.linear_proj):
            p.tensor_model_parallel = True
        self.heads, self.groups = HEADS // world, GROUPS // world

    def forward(self, x):
        out = attention(x, x @ self.linear_q.t(), x @ self.linear_kv.t(), self.q_layernorm,
                        self.k_layernorm, self.heads, self.groups)
        return x + ReduceFromParallel.apply(out @ self.linear_proj.t())


class SplitTrainStep:
    """begin_train_step / train_microbatch / finish_train_step, as the split API runs them."""

    def __init__(self, model, opt, fix: bool) -> None:
        self.model, self.opt, self.fix = model, opt, fix

    def begin_train_step(self) -> None:
        self.opt.zero_grad()

    def train_microbatch(self, x, y) -> float:
        loss = F.mse_loss(self.model(x), y) / MICROBATCHES
        loss.backward()
        return loss.item()

    def finish_train_step(self) -> None:
        # the data-parallel gradient sync would run here (data-parallel size 1: nothing to do)
        if self.fix:  # the fix: finalize's all-reduce of the parameters every TP rank holds whole
            for p in self.model.parameters():
                if not getattr(p, "tensor_model_parallel", False):
                    dist.all_reduce(p.grad)
        self.opt.step()


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert GROUPS % world == 0, "the ranks must split %d key/value groups evenly" % GROUPS
    dev = _truth.device()
    model = SelfAttention(rank, world).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    probe.watch(opt, model.named_parameters())
    worker = SplitTrainStep(model, opt, fix)
    data = torch.Generator().manual_seed(2000)  # tensor-parallel ranks share the batches
    for step in range(3):
        worker.begin_train_step()
        for micro in range(MICROBATCHES):
            x = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
            y = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
            probe.batch(x, y)
            loss = worker.train_microbatch(x, y)
        worker.finish_train_step()
    print("rank %d: loss %.5f" % (rank, loss), flush=True)


SPLIT = {"linear_q": 0, "linear_kv": 0, "linear_proj": 1}


def reference_grads(batches):
    w = {n: v.double().requires_grad_() for n, v in full_weights().items()}
    q_norm, k_norm = RMSNorm(CHANNELS).double(), RMSNorm(CHANNELS).double()
    losses = []
    for x, y in batches:
        out = attention(x, x @ w["linear_q"].t(), x @ w["linear_kv"].t(), q_norm, k_norm, HEADS, GROUPS)
        losses.append(F.mse_loss(x + out @ w["linear_proj"].t(), y))
    torch.stack(losses).mean().backward()
    grads = {n: v.grad for n, v in w.items()}
    grads.update({"q_layernorm.weight": q_norm.weight.grad, "k_layernorm.weight": k_norm.weight.grad})
    return grads


def split_ref(ref, name, rank, world):
    """A rank's slice of a split weight; linear_kv is split by key/value group."""
    return ref[name].chunk(world, dim=SPLIT[name])[rank]


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    ref, world = reference_grads(probe.batches[:MICROBATCHES]), len(rows)
    kinds = {"qk_layernorm": [], "split": []}
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            if name in SPLIT:
                kinds["split"].append(_truth.compare(g, split_ref(ref, name, rank, world)))
            else:
                kinds["qk_layernorm"].append(_truth.compare(g, ref[name]))
    record = {k: _truth.summarize(v) for k, v in kinds.items()}
    record["replica_spread"] = {n: _truth.replica_spread([row["after"][n] for row in rows])
                                for n in rows[0]["after"] if n not in SPLIT}
    record.update({"program": "nemorl3716_split_api_qk_norm", "fix": fix, "class": "missing_reduction"})
    return record


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
