"""karpathy/nanochat PR #857 ("Fix LR divergence across ranks in SFT"): in epoch-based SFT the
learning rate is a function of `progress`, which each rank computes from its own dataloader (how
far through its shard of the conversations it is). One rank may pack more short conversations
into its rows than another, so the ranks reach different progress, hence different learning
rates, and with the same averaged gradients they step their replicas apart. The maintainers
fixed it with a step-based schedule, the same on every rank.

Here, 2 ranks: a tiny language model (embedding 30 x 8, a 30-way head) trained with AdamW on
rows of 12 tokens packed from each rank's shard of conversations of uneven lengths; the
gradients are averaged over the ranks; the learning rate decays linearly with progress.

The bug: progress is the fraction of the rank's shard its loader has consumed: the ranks' rates
differ from the first step, their gradients do not, and the replicas drift apart. --fix takes
progress from the step count.

Ground truth (--check-truth OUT): the learning rates each rank used, its gradients at the first
step (compared across the ranks) and its parameters after the last step (compared across the
ranks). Bug: the gradients are bit for bit the same, the rates and the parameters are not; fix:
all the same.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
VOCAB, WIDTH, ROW, CONVERSATIONS, STEPS = 30, 8, 12, 24, 3


def conversations():
    g = torch.Generator().manual_seed(1100)  # the dataset: the same on every rank
    return [torch.randint(0, VOCAB, (int(torch.randint(2, 10, (1,), generator=g)),), generator=g)
            for _ in range(CONVERSATIONS)]


def sft_data_generator(rank: int, world: int):
    """Rows of ROW tokens packed from this rank's shard; yields (row, progress in its shard)."""
    shard = conversations()[rank::world]
    cursor = 0
    while True:
        row = []
        while cursor < len(shard) and len(row) + len(shard[cursor]) <= ROW + 1:
            row += shard[cursor].tolist()
            cursor += 1
        row = (row + [0] * (ROW + 1))[:ROW + 1]
        yield torch.tensor(row), cursor / len(shard)


def get_lr_multiplier(progress: float) -> float:
    return 1.0 - 0.9 * progress


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Linear(WIDTH, VOCAB)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
    for group in opt.param_groups:
        group["initial_lr"] = group["lr"]
    probe.watch(opt, model.named_parameters())
    loader = sft_data_generator(rank, world)
    progress = 0.0
    for step in range(STEPS):
        row, approx_progress = next(loader)
        row = row.to(dev)
        probe.batch(row)
        loss = F.cross_entropy(model(row[:-1]), row[1:])
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        if fix:  # the fix: progress from the step count, the same on every rank
            progress = (step + 1) / STEPS
        else:  # the bug: progress from this rank's dataloader
            progress = max(progress, approx_progress)
        lrm = get_lr_multiplier(progress)
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lrm
        probe.note("lr", opt.param_groups[0]["lr"])
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f, lr %.5f" % (rank, loss.item(), opt.param_groups[0]["lr"]), flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "after": probe.params[-1], "lr": probe.notes["lr"]})
    if dist.get_rank() != 0:
        return None
    names = list(rows[0]["after"])
    return {"program": "nanochat857_lr_progress", "fix": fix, "class": "replica_divergence",
            "lr_by_rank": [r["lr"] for r in rows],
            "grad_spread": max(_truth.replica_spread([r["grads"][n] for r in rows]) for n in names),
            "param_spread": max(_truth.replica_spread([r["after"][n] for r in rows]) for n in names)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
