"""bigcode-project/Megatron-LM #11 ("Double-check the code for key/value gradient reduction in the
case of MQA, when tensor-model-parallel > 1": "Aren't the gradients of the biases missing from
the reduction?"), fixed by PR #12 ("Fixes for MQA": "Add reduction for the biases"). With
multi-query attention and tensor parallelism, every rank holds the one key/value projection
whole while its query heads are split over the ranks, so each rank's key/value gradient covers
its own heads only; the optimizer all-reduced the key/value weights' gradients over the
tensor-parallel ranks, layer by layer, but not the biases'. The PR's test showed the biases
apart across the ranks (7.2e-05 against -8.1e-05) while the weights agreed.

Here, 2 tensor-parallel ranks on one batch of 5 tokens of width 16, two layers of multi-query
attention: a LayerNorm, the query projection split by heads (4 heads of 4, 2 on each rank), the
key/value projection (one head) replicated with its bias zero-initialized as Megatron
initializes biases, the output projection split by input columns and all-reduced in the forward.

The bug: the key/value biases step with each rank's partial gradient: not the gradient of the
loss, different on the two ranks, and their copies drift apart from the first step (the weights
stay together). --fix reduces the biases with the weights, in one coalesced buffer.

Ground truth (--check-truth OUT): one process runs all 4 heads of both layers; each rank's
gradients at the first step are compared with it (split weights with their slice) and the
replicated parameters are compared across the ranks after the last step. Bug: the key/value
biases do not match (large residual) and differ across the ranks; fix: everything matches.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
LAYERS, HIDDEN, HEADS, HEAD_DIM, TOKENS = 2, 16, 4, 4, 5


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


def full_weights(layer: int):
    torch.manual_seed(layer)
    return {"query.weight": torch.randn(HEADS * HEAD_DIM, HIDDEN) * 0.3,
            "query.bias": torch.randn(HEADS * HEAD_DIM) * 0.1,
            "key_value.weight": torch.randn(2 * HEAD_DIM, HIDDEN) * 0.3,
            "key_value.bias": torch.zeros(2 * HEAD_DIM),
            "dense.weight": torch.randn(HIDDEN, HEADS * HEAD_DIM) * 0.3,
            "dense.bias": torch.zeros(HIDDEN)}


def mqa(x, q, kv, heads: int):
    k, v = kv.split(HEAD_DIM, dim=-1)
    q = q.view(TOKENS, heads, HEAD_DIM).transpose(0, 1)  # [heads, tokens, dim]
    probs = torch.softmax(q @ k.t() / HEAD_DIM ** 0.5, dim=-1)
    return (probs @ v).transpose(0, 1).reshape(TOKENS, heads * HEAD_DIM)


class SelfAttention(torch.nn.Module):
    def __init__(self, layer: int, rank: int, world: int) -> None:
        super().__init__()
        w = full_weights(layer)
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.query = torch.nn.Linear(HIDDEN, HEADS * HEAD_DIM // world)  # column-parallel
        self.key_value = torch.nn.Linear(HIDDEN, 2 * HEAD_DIM)  # multi-query: replicated
        self.dense_weight = torch.nn.Parameter(w["dense.weight"].chunk(world, dim=1)[rank].clone())
        self.dense_bias = torch.nn.Parameter(w["dense.bias"])
        with torch.no_grad():
            self.query.weight.copy_(w["query.weight"].chunk(world)[rank])
            self.query.bias.copy_(w["query.bias"].chunk(world)[rank])
            self.key_value.weight.copy_(w["key_value.weight"])
            self.key_value.bias.copy_(w["key_value.bias"])
        self.heads = HEADS // world

    def forward(self, x):
        h = CopyToParallel.apply(self.norm(x))
        out = mqa(x, self.query(h), self.key_value(h), self.heads)
        return x + ReduceFromParallel.apply(out @ self.dense_weight.t()) + self.dense_bias


def allreduce_key_value_grads(layers, fix: bool) -> None:
    """The optimizer's reduction of the multi-query key/value gradients, coalesced."""
    grads = [layer.key_value.weight.grad for layer in layers]
    if fix:  # the fix: the biases too
        grads += [layer.key_value.bias.grad for layer in layers]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for g, v in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(v.view_as(g))


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert HEADS % world == 0, "the ranks must split %d heads evenly" % HEADS
    dev = _truth.device()
    layers = torch.nn.ModuleList(SelfAttention(i, rank, world) for i in range(LAYERS)).to(dev)
    opt = torch.optim.SGD(layers.parameters(), lr=0.2)
    probe.watch(opt, layers.named_parameters())
    data = torch.Generator().manual_seed(900)  # tensor-parallel ranks share the batch
    for step in range(2):
        x = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
        y = torch.randn(TOKENS, HIDDEN, generator=data).to(dev)
        probe.batch(x, y)
        h = x
        for layer in layers:
            h = layer(h)
        loss = F.mse_loss(h, y)
        loss.backward()
        allreduce_key_value_grads(layers, fix)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


SPLIT = {"query.weight": 0, "query.bias": 0, "dense_weight": 1}


def reference_grads(batch):
    ws = [{n: v.double().requires_grad_() for n, v in full_weights(i).items()} for i in range(LAYERS)]
    norms = [torch.nn.LayerNorm(HIDDEN).double() for _ in range(LAYERS)]
    x, y = batch
    h = x
    for w, norm in zip(ws, norms):
        n = norm(h)
        out = mqa(h, F.linear(n, w["query.weight"], w["query.bias"]),
                  F.linear(n, w["key_value.weight"], w["key_value.bias"]), HEADS)
        h = h + out @ w["dense.weight"].t() + w["dense.bias"]
    F.mse_loss(h, y).backward()
    grads = {}
    for i, (w, norm) in enumerate(zip(ws, norms)):
        grads.update({"%d.%s" % (i, n.replace("dense.", "dense_")): v.grad for n, v in w.items()})
        grads.update({"%d.norm.%s" % (i, n): p.grad for n, p in norm.named_parameters()})
    return grads


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    ref, world = reference_grads(probe.batches[0]), len(rows)
    kinds = {"key_value.bias": [], "key_value.weight": [], "other": []}
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            param = name.split(".", 1)[1]
            r = ref[name].chunk(world, dim=SPLIT[param])[rank] if param in SPLIT else ref[name]
            kinds[param if param.startswith("key_value") else "other"].append(_truth.compare(g, r))
    record = {k: _truth.summarize(v) for k, v in kinds.items()}
    record["replica_spread"] = {
        name: _truth.replica_spread([row["after"][name] for row in rows])
        for name in rows[0]["after"] if name.split(".", 1)[1] not in SPLIT}
    record.update({"program": "bigcode12_mqa_kv_bias", "fix": fix, "class": "missing_reduction"})
    return record


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
