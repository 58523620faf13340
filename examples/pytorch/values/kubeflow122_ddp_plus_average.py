"""A control, not a bug: kubeflow/pytorch-operator #122 ("Double gradient reduction in
examples?"): the MNIST DDP example wrapped its model in DistributedDataParallel, which averages the
gradients in the backward, and then also called a hand-written `average_gradients` (all_reduce
with SUM, then divide by the world size), the one of PyTorch's distributed tutorial ("Double
trouble?"); the maintainers answered they would change the example. The second reduction is
redundant, not wrong: after DDP every rank holds the same average, so the SUM is world_size times
it and the division gives it back, exactly (a sum of equal values and a division by a power of
two are exact here).

Here, 2 ranks: a small MNIST-style classifier (16 pixels, 12 hidden, 10 classes) in DDP, each
rank its own batch; `average_gradients` after every backward. --fix removes it.

A checker must not call this a double reduction: the value the step takes is the average either
way.

Ground truth (--check-truth OUT): one process runs the classifier on both ranks' batches and
backpropagates the mean loss; each rank's gradients at the first step are compared with it.
Both variants: factor 1; and the parameters after the last step are the same in both variants
and on both ranks.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import _truth

RANKS = 2
PIXELS, HIDDEN, CLASSES, BATCH = 16, 12, 10, 8


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(PIXELS, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def average_gradients(model) -> None:
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def train(fix: bool, probe: _truth.Probe) -> None:
    rank = dist.get_rank()
    dev = _truth.device()
    model = DDP(Net().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    probe.watch(opt, model.module.named_parameters())
    data = torch.Generator().manual_seed(1900 + rank)
    for step in range(3):
        x = torch.randn(BATCH, PIXELS, generator=data).to(dev)
        target = torch.randint(0, CLASSES, (BATCH,), generator=data).to(dev)
        probe.batch(x, target)
        loss = F.nll_loss(model(x), target)
        loss.backward()
        if not fix:  # the redundant second reduction
            average_gradients(model)
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial, "batch": probe.batches[0],
                          "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    model = Net().double()
    model.load_state_dict(rows[0]["initial"])
    torch.stack([F.nll_loss(model(r["batch"][0]), r["batch"][1]) for r in rows]).mean().backward()
    ref = dict(model.named_parameters())
    results = [_truth.compare(row["grads"][n], ref[n].grad) for row in rows for n in ref]
    return {"program": "kubeflow122_ddp_plus_average", "fix": fix, "class": "none (control)",
            "all": _truth.summarize(results),
            "param_spread": max(_truth.replica_spread([r["after"][n] for r in rows]) for n in ref),
            "param_digest": float(sum(v.sum() for v in rows[0]["after"].values()))}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
