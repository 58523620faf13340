"""megablocks PR #20 ("Fix weight gradients with expert model parallelism": "Scale weight
gradients by 1 / world_size when ep is enabled"): with expert model parallelism over all the
ranks, each rank holds a slice of the experts and no reduction runs for their weights, so nothing
divided their gradients by the number of ranks whose losses they carry. The fix scales the
expert weights' gradients by 1 / expert_parallel_world_size in the forward, with an autograd
function that is the identity going forward (megablocks' `scale_gradient`).

Here, 2 ranks: 4 experts stored as megablocks stores them, stacked weights `w1` [experts, 10, 16]
and `w2` [experts, 16, 10], 2 experts on each rank and applied with a batched matmul; a router
replicated on both ranks, its gradient averaged over the data-parallel ranks as Megatron's DDP
does; expert-choice routing (each expert takes its best 2 of every rank's 8 tokens) and
all_to_all to send every expert its tokens and bring the results back. An expert's gradient is
a sum over both ranks' losses before any reduction.

The bug: no gradient scale: the expert weights step with 2 times the gradient of the mean loss
(the expert-parallel size in general); dense gradients are right, nothing diverges. --fix scales
by 1 / 2 in the forward.

Ground truth (--check-truth OUT): one process holds the router and all 4 experts and
backpropagates the mean of both ranks' losses; each rank's gradients at the first step are
compared with the reference's slice. Bug: expert factor 2, dense 1; fix: both 1.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dfn
import torch.nn.functional as F

import _truth

RANKS = 2
EXPERTS, WIDTH, FFN, TOKENS, CAPACITY = 4, 10, 16, 8, 2


class ScaleGradient(torch.autograd.Function):
    """The identity going forward; the gradient times `scale` coming back (megablocks)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class ExpertMLP(torch.nn.Module):
    def __init__(self, first: int, count: int, gradient_scale) -> None:
        super().__init__()
        torch.manual_seed(1)  # every rank draws all the experts and keeps its slice
        w1 = torch.randn(EXPERTS, WIDTH, FFN) * 0.2
        w2 = torch.randn(EXPERTS, FFN, WIDTH) * 0.2
        self.w1 = torch.nn.Parameter(w1[first:first + count].clone())
        self.w2 = torch.nn.Parameter(w2[first:first + count].clone())
        self.gradient_scale = gradient_scale

    def scale_grad(self, w):
        if self.gradient_scale is None:
            return w
        return ScaleGradient.apply(w, self.gradient_scale)

    def forward(self, x):  # x: [local experts, tokens, width]
        return torch.bmm(F.gelu(torch.bmm(x, self.scale_grad(self.w1))), self.scale_grad(self.w2))


class MoE(torch.nn.Module):
    def __init__(self, rank: int, world: int, fix: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(WIDTH, EXPERTS)
        self.local = EXPERTS // world
        scale = 1.0 / world if fix else None  # the fix: 1 / expert_parallel_world_size
        self.mlp = ExpertMLP(rank * self.local, self.local, scale)
        self.world = world

    def forward(self, x):
        gate = torch.softmax(self.router(x), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)  # [CAPACITY, EXPERTS]
        rows = picked.t().reshape(-1)  # expert 0's tokens, expert 1's, ...: ranks in order
        sent = dfn.all_to_all_single(torch.empty_like(x[rows]), x[rows])
        # from each rank: its tokens for this rank's experts, expert by expert
        sent = sent.view(self.world, self.local, CAPACITY, WIDTH).transpose(0, 1)
        done = self.mlp(sent.reshape(self.local, self.world * CAPACITY, WIDTH))
        done = done.view(self.local, self.world, CAPACITY, WIDTH).transpose(0, 1).reshape(-1, WIDTH)
        back = dfn.all_to_all_single(torch.empty_like(done), done)
        return torch.zeros_like(x).index_add(0, rows, back * score.t().reshape(-1, 1))


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert EXPERTS % world == 0, "the ranks must split %d experts evenly" % EXPERTS
    dev = _truth.device()
    model = MoE(rank, world, fix).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(200 + rank)
    for step in range(2):
        x = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        y = torch.randn(TOKENS, WIDTH, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.router.parameters():  # data-parallel parameters: averaged
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()  # the experts' weights: no reduction (expert parallelism over every rank)
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def reference_grads(initials, batches):
    router = torch.nn.Linear(WIDTH, EXPERTS).double()
    router.load_state_dict({"weight": initials[0]["router.weight"], "bias": initials[0]["router.bias"]})
    w1 = torch.cat([i["mlp.w1"] for i in initials]).requires_grad_()
    w2 = torch.cat([i["mlp.w2"] for i in initials]).requires_grad_()
    losses = []
    for x, y in batches:
        gate = torch.softmax(router(x), dim=-1)
        score, picked = gate.topk(CAPACITY, dim=0)
        out = torch.zeros_like(x)
        for e in range(EXPERTS):
            h = F.gelu(x[picked[:, e]] @ w1[e]) @ w2[e]
            out = out.index_add(0, picked[:, e], h * score[:, e:e + 1])
        losses.append(F.mse_loss(out, y))
    torch.stack(losses).mean().backward()
    return router, w1.grad, w2.grad


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial, "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    router, w1, w2 = reference_grads([r["initial"] for r in rows], [r["batch"] for r in rows])
    local = EXPERTS // len(rows)
    dense, expert = [], []
    for rank, row in enumerate(rows):
        g = row["grads"]
        dense += [_truth.compare(g["router.weight"], router.weight.grad),
                  _truth.compare(g["router.bias"], router.bias.grad)]
        part = slice(rank * local, (rank + 1) * local)
        expert += [_truth.compare(g["mlp.w1"], w1[part]), _truth.compare(g["mlp.w2"], w2[part])]
    return {"program": "megablocks20_expert_grad_scale", "fix": fix, "class": "divisor_mismatch",
            "dense": _truth.summarize(dense), "expert": _truth.summarize(expert)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
