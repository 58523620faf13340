"""rmchurch/disruptcnn #3 ("ReduceLROnPlateau not reducing in certain scenarios"): in
distributed training the ReduceLROnPlateau scheduler is stepped with each rank's own validation
loss ("the global total_loss is only created in the logging, and the local total_loss does not
meet the criteria"). Each rank decides alone whether its loss plateaued, so the ranks' learning
rates part, and with the same averaged gradients the DistributedDataParallel replicas step apart.

Here, 2 ranks: a small temporal convolutional classifier (a 2-channel signal of 16 samples, a
convolution of 6 filters, a linear head) in DDP; two training batches per epoch from the rank's
shard, 4 epochs; a validation pass over the rank's own validation shard after each epoch, then
`scheduler.step(total_loss)` (patience 0). The two validation shards disagree (rank 1's labels
follow the opposite rule), so rank 0's validation loss falls while rank 1's rises.

The bug: rank 1's scheduler halves its learning rate after the third epoch and rank 0's does
not; in the fourth epoch the replicas step with different rates and come apart. --fix averages the
validation loss over the ranks first, so every scheduler sees the same number.

Ground truth (--check-truth OUT): the learning rate each rank used in every epoch and its
parameters at the end, compared across the ranks. Bug: the rates and the parameters differ;
fix: bit for bit the same.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import _truth

RANKS = 2
CHANNELS, SAMPLES, FILTERS, BATCH, EPOCHS = 2, 16, 6, 8, 4


class TCN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(CHANNELS, FILTERS, kernel_size=3, padding=1)
        self.head = torch.nn.Linear(FILTERS, 1)

    def forward(self, x):
        return self.head(F.relu(self.conv(x)).mean(dim=-1)).squeeze(-1)


def shard(generator, inverted: bool):
    x = torch.randn(BATCH, CHANNELS, SAMPLES, generator=generator)
    y = (x[:, 0].mean(dim=-1) > 0).float()
    return x, (1 - y) if inverted else y


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = DDP(TCN().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0)
    probe.watch(opt, model.module.named_parameters())
    data = torch.Generator().manual_seed(1300 + rank)
    val_x, val_y = shard(torch.Generator().manual_seed(1400 + rank), inverted=rank == 1)
    val_x, val_y = val_x.to(dev), val_y.to(dev)
    for epoch in range(EPOCHS):
        probe.note("lr", opt.param_groups[0]["lr"])
        for step in range(2):
            x, y = shard(data, inverted=False)
            loss = F.binary_cross_entropy_with_logits(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            total_loss = F.binary_cross_entropy_with_logits(model.module(val_x), val_y)
        if fix:  # the fix: the global validation loss
            dist.all_reduce(total_loss)
            total_loss /= world
        scheduler.step(total_loss.item())
    print("rank %d: validation loss %.5f, lr %.4f" % (rank, total_loss.item(), opt.param_groups[0]["lr"]),
          flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"after": probe.params[-1], "lr": probe.notes["lr"]})
    if dist.get_rank() != 0:
        return None
    names = list(rows[0]["after"])
    return {"program": "disruptcnn3_plateau_local_loss", "fix": fix, "class": "replica_divergence",
            "lr_by_rank": [r["lr"] for r in rows],
            "param_spread": max(_truth.replica_spread([r["after"][n] for r in rows]) for n in names)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
