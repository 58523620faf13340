"""Megatron-LM #1446 ("final_layernorm gradient mismatch when TP+SP enabled"): with tensor and
sequence parallelism, a LayerNorm in the sequence-parallel region sees only its rank's part of
the sequence, so its gradient is a partial sum that Megatron all-reduces over the
tensor-parallel ranks after the backward, for the parameters marked `sequence_parallel`. The
final LayerNorm was not marked: its `main_grad` differed across the tensor-parallel ranks before
`optimizer.step()`, and the copies every rank holds of it drift apart.

Here, 2 tensor-parallel ranks on one sequence of 8 tokens of width 12: each rank holds 4 tokens
in the sequence-parallel regions; an input LayerNorm (marked), an MLP split as Megatron splits
it (the sequence all-gathered in front of the first weight, reduce-scattered after the second), a
residual, the final LayerNorm (not marked) and an output layer split by output columns over the
gathered sequence (its loss the squared error of each rank's columns, which add up). Both
LayerNorms start as LayerNorms do, weights ones and biases zeros.

The bug: the final LayerNorm's gradient is each rank's half of the sequence: neither the
gradient of the loss nor the same on both ranks, and its copies drift apart from the first step.
--fix marks it `sequence_parallel`, so Megatron's own reduction covers it with the input
LayerNorm (the issue proposes no fix; this is the mechanism Megatron uses for the others).

Ground truth (--check-truth OUT): one process runs the whole model on the whole sequence;
each rank's gradients at the first step are compared with it (split weights with their slice),
and the copies of the LayerNorms are compared across the ranks after the last step. Bug: the
final LayerNorm's gradients do not match (large residual) and its copies differ; fix: everything
matches and the copies are bit for bit the same.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
SEQ, WIDTH, FFN, VOCAB = 8, 12, 24, 10


def all_gather_seq(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def reduce_scatter_seq(x):
    """Sum over the ranks, keep this rank's part of the sequence (gloo in torch 1.13 has no
    reduce-scatter: all-reduce, then take the part)."""
    x = x.clone()
    dist.all_reduce(x)
    return x.chunk(dist.get_world_size())[dist.get_rank()].contiguous()


class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return all_gather_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_seq(grad)


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return reduce_scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_seq(grad)


def full_weights():
    torch.manual_seed(0)
    return {"fc1": torch.randn(FFN, WIDTH) * 0.3, "fc2": torch.randn(WIDTH, FFN) * 0.3,
            "output": torch.randn(VOCAB, WIDTH) * 0.3}


class GPT(torch.nn.Module):
    def __init__(self, rank: int, world: int, fix: bool) -> None:
        super().__init__()
        w = full_weights()
        self.input_layernorm = torch.nn.LayerNorm(WIDTH)
        self.fc1 = torch.nn.Parameter(w["fc1"].chunk(world)[rank].clone())  # column-parallel
        self.fc2 = torch.nn.Parameter(w["fc2"].chunk(world, dim=1)[rank].clone())  # row-parallel
        self.final_layernorm = torch.nn.LayerNorm(WIDTH)
        self.output_layer = torch.nn.Parameter(w["output"].chunk(world)[rank].clone())
        for p in self.input_layernorm.parameters():
            p.sequence_parallel = True
        if fix:  # the fix: the final LayerNorm is in the sequence-parallel region too
            for p in self.final_layernorm.parameters():
                p.sequence_parallel = True

    def forward(self, x):  # x: this rank's part of the sequence
        h = GatherFromSequenceParallel.apply(self.input_layernorm(x))
        h = ReduceScatterToSequenceParallel.apply(F.gelu(h @ self.fc1.t()) @ self.fc2.t())
        h = self.final_layernorm(x + h)
        return GatherFromSequenceParallel.apply(h) @ self.output_layer.t()  # this rank's columns


def allreduce_layernorm_grads(model) -> None:
    """Megatron's finalize step for the parameters of the sequence-parallel region."""
    grads = [p.grad for p in model.parameters() if getattr(p, "sequence_parallel", False)]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for g, v in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(v.view_as(g))


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = GPT(rank, world, fix).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    probe.watch(opt, model.named_parameters())
    data = torch.Generator().manual_seed(800)  # the tensor-parallel ranks share the sequence
    for step in range(2):
        x = torch.randn(SEQ, WIDTH, generator=data).to(dev)
        y = torch.randn(SEQ, VOCAB, generator=data).to(dev)
        probe.batch(x, y)
        logits = model(x.chunk(world)[rank])
        loss = (logits - y.chunk(world, dim=1)[rank]).pow(2).sum() / y.numel()  # this rank's share
        loss.backward()
        allreduce_layernorm_grads(model)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss share %.5f" % (rank, loss.item()), flush=True)


SPLIT = {"fc1": 0, "fc2": 1, "output_layer": 0}


def reference_grads(batch):
    w = {n: v.double().requires_grad_() for n, v in full_weights().items()}
    ln1, ln2 = torch.nn.LayerNorm(WIDTH).double(), torch.nn.LayerNorm(WIDTH).double()
    x, y = batch
    h = ln2(x + F.gelu(ln1(x) @ w["fc1"].t()) @ w["fc2"].t())
    F.mse_loss(h @ w["output"].t(), y).backward()
    grads = {"fc1": w["fc1"].grad, "fc2": w["fc2"].grad, "output_layer": w["output"].grad}
    grads.update({"input_layernorm." + n: p.grad for n, p in ln1.named_parameters()})
    grads.update({"final_layernorm." + n: p.grad for n, p in ln2.named_parameters()})
    return grads


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    ref, world = reference_grads(probe.batches[0]), len(rows)
    kinds = {"final_layernorm": [], "input_layernorm": [], "split": []}
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            if name in SPLIT:
                kinds["split"].append(_truth.compare(g, ref[name].chunk(world, dim=SPLIT[name])[rank]))
            else:
                kinds[name.split(".")[0]].append(_truth.compare(g, ref[name]))
    record = {k: _truth.summarize(v) for k, v in kinds.items()}
    record["replica_spread"] = {
        name: _truth.replica_spread([row["after"][name] for row in rows])
        for name in rows[0]["after"] if name not in SPLIT}
    record.update({"program": "megatron1446_sp_final_layernorm", "fix": fix, "class": "missing_reduction"})
    return record


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
