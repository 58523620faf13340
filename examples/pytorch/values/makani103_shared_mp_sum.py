"""NVIDIA/makani PR #103 ("distributed parameter hook cleanup and fixes": "gradient reduction
correctness under feature parallelism (matmul > 1)"): makani's gradient reduction hooks
SUM-reduced every parameter's gradient over every model-parallel group named in the parameter's
`is_shared_mp`. That is right where each rank holds a partial gradient (a spatially sharded
input) and over-counts by the group size where each rank already holds the whole gradient, the
same on all of them: a parameter replicated over the `matmul` group whose input is replicated
there. The fix pre-divides those gradients by the group's size, so the SUM averages them.

Here, 2 ranks forming one `matmul` (feature-parallel) group that sees the same sample, as
makani's distributed MLP splits it: a replicated encoder and LayerNorm, the MLP's first weight
split by output rows and its second by input columns (an all-reduce in the backward of the
MLP's input, another in the forward of its output), the second bias and a decoder replicated.
The replicated parameters' gradients come out of the backward whole and equal on both ranks
(their activations' gradients were already reduced); the hook sums them over the group again.

The bug: every replicated parameter steps with 2 times its gradient (the matmul group's size in
general), the same on both ranks; the split weights are right. --fix pre-divides the replicated
parameters' gradients by the group size before the sum.

Ground truth (--check-truth OUT): one process runs the whole model on the sample and
backpropagates its loss; each rank's gradients at the first step are compared with it (the
split weights with their slice). Bug: replicated factor 2, split 1; fix: both 1.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
IN, WIDTH, HIDDEN, OUT, SAMPLES = 6, 10, 14, 3, 5


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


class DistributedMLPNet(torch.nn.Module):
    def __init__(self, rank: int, world: int) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same full weights on every rank; each keeps its part
        self.encoder = torch.nn.Linear(IN, WIDTH)
        self.norm = torch.nn.LayerNorm(WIDTH)
        fc1, b1 = torch.randn(HIDDEN, WIDTH) * 0.3, torch.randn(HIDDEN) * 0.1
        fc2 = torch.randn(WIDTH, HIDDEN) * 0.3
        part = slice(rank * HIDDEN // world, (rank + 1) * HIDDEN // world)
        self.fc1_weight = torch.nn.Parameter(fc1[part].clone())
        self.fc1_bias = torch.nn.Parameter(b1[part].clone())
        self.fc2_weight = torch.nn.Parameter(fc2[:, part].clone())
        self.fc2_bias = torch.nn.Parameter(torch.zeros(WIDTH))
        self.decoder = torch.nn.Linear(WIDTH, OUT)
        for p in [*self.encoder.parameters(), *self.norm.parameters(), self.fc2_bias,
                  *self.decoder.parameters()]:
            p.is_shared_mp = ["matmul"]  # replicated over the feature-parallel group
        for p in [self.fc1_weight, self.fc1_bias, self.fc2_weight]:
            p.is_shared_mp = []  # split over it

    def forward(self, x):
        h = self.norm(self.encoder(x))
        z = F.gelu(F.linear(CopyToParallel.apply(h), self.fc1_weight, self.fc1_bias))
        h = h + ReduceFromParallel.apply(F.linear(z, self.fc2_weight)) + self.fc2_bias
        return self.decoder(h)


def init_gradient_reduction_hooks(model, groups, fix: bool) -> None:
    """Sum every gradient over each group in its `is_shared_mp` once the backward is done
    (makani runs this as a DDP communication hook)."""

    def reduce(p):
        def hook(grad):
            grad = grad.clone()
            for name in p.is_shared_mp:
                if fix:  # the fix: the input is replicated over this group, so average
                    grad.div_(dist.get_world_size(groups[name]))
                dist.all_reduce(grad, group=groups[name])
            return grad
        return hook

    for p in model.parameters():
        if p.is_shared_mp:
            p.register_hook(reduce(p))


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = DistributedMLPNet(rank, world).to(dev)
    init_gradient_reduction_hooks(model, {"matmul": None}, fix)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(500)  # the matmul group sees one sample
    for step in range(2):
        x = torch.randn(SAMPLES, IN, generator=data).to(dev)
        y = torch.randn(SAMPLES, OUT, generator=data).to(dev)
        probe.batch(x, y)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def reference_grads(initials, batch):
    """The whole model on one process: the split weights put back together."""
    world = len(initials)
    full = dict(initials[0])
    full["fc1_weight"] = torch.cat([i["fc1_weight"] for i in initials])
    full["fc1_bias"] = torch.cat([i["fc1_bias"] for i in initials])
    full["fc2_weight"] = torch.cat([i["fc2_weight"] for i in initials], dim=1)
    params = {n: v.clone().requires_grad_() for n, v in full.items()}
    x, y = batch
    h = F.layer_norm(F.linear(x, params["encoder.weight"], params["encoder.bias"]), (WIDTH,),
                     params["norm.weight"], params["norm.bias"])
    z = F.gelu(F.linear(h, params["fc1_weight"], params["fc1_bias"]))
    h = h + F.linear(z, params["fc2_weight"]) + params["fc2_bias"]
    F.mse_loss(F.linear(h, params["decoder.weight"], params["decoder.bias"]), y).backward()
    grads = {n: p.grad for n, p in params.items()}
    split = {"fc1_weight": 0, "fc1_bias": 0, "fc2_weight": 1}
    return grads, split, world


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial})
    if dist.get_rank() != 0:
        return None
    grads, split, world = reference_grads([r["initial"] for r in rows], probe.batches[0])
    replicated, sharded = [], []
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            if name in split:
                ref = grads[name].chunk(world, dim=split[name])[rank]
                sharded.append(_truth.compare(g, ref))
            else:
                replicated.append(_truth.compare(g, grads[name]))
    return {"program": "makani103_shared_mp_sum", "fix": fix, "class": "double_reduction",
            "replicated": _truth.summarize(replicated), "split": _truth.summarize(sharded)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
