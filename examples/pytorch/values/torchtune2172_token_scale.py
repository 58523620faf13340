"""torchtune PR #2172 ("Fix gradient scaling to account for world_size normalization"): the
distributed full-finetune recipe sums each rank's token losses, all-reduces the number of
non-padded tokens over the ranks, and scales the gradients by 1 / that global count; but FSDP
(like DDP) has already averaged the gradients over the ranks in the backward, so the step takes
1 / world_size of the gradient of the per-token mean loss. The fix scales by
world_size / num_tokens.

Here, 2 ranks: a tiny language model (embedding 24 x 16, a tanh layer, a 24-way head) wrapped in
DDP, which averages over the ranks as FSDP does; each rank's batch is 2 sequences of 6 tokens
with a different number of padded labels (-100), so the ranks hold different token counts.

The bug: every gradient is 1/2 of the gradient of the mean token loss over the global batch
(1 / world_size in general); the same on both ranks. --fix scales by world_size / num_tokens.

Ground truth (--check-truth OUT): one process computes the summed cross-entropy of both ranks'
batches divided by their total count of labelled tokens and backpropagates it; each rank's
gradient at the first step is compared with it. Bug: factor 0.5; fix: 1.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import _truth

RANKS = 2
VOCAB, WIDTH, SEQS, LENGTH, IGNORE = 24, 16, 2, 6, -100


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layer = torch.nn.Linear(WIDTH, WIDTH)
        self.output = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.output(torch.tanh(self.layer(self.embed(tokens))))


def batch(rank: int, generator, dev):
    tokens = torch.randint(0, VOCAB, (SEQS, LENGTH), generator=generator)
    labels = torch.randint(0, VOCAB, (SEQS, LENGTH), generator=generator)
    labels[:, LENGTH - 1 - 2 * rank:] = IGNORE  # padding: rank 0 keeps 5 of 6, rank 1 3 of 6
    return tokens.to(dev), labels.to(dev)


def scale_grads(model, scaler) -> None:
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(scaler)


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = _truth.device()
    model = DDP(TinyLM().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    probe.watch(opt, model.module.named_parameters())
    data = torch.Generator().manual_seed(400 + rank)
    for step in range(2):
        tokens, labels = batch(rank, data, dev)
        probe.batch(tokens, labels)
        num_tokens = (labels != IGNORE).sum()
        logits = model(tokens)
        loss_sum = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE,
                                   reduction="sum")
        loss_sum.backward()  # DDP averages the gradients over the ranks
        dist.all_reduce(num_tokens)
        scale_grads(model, (world if fix else 1) / num_tokens)  # the bug: 1 / num_tokens
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss_sum.item() / num_tokens.item()), flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial, "batch": probe.batches[0]})
    if dist.get_rank() != 0:
        return None
    model = TinyLM().double()
    model.load_state_dict(rows[0]["initial"])
    tokens = torch.cat([r["batch"][0] for r in rows])
    labels = torch.cat([r["batch"][1] for r in rows])
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE)
    loss.backward()  # the mean over every labelled token of the global batch
    results = [_truth.compare(row["grads"][n], p.grad) for row in rows for n, p in model.named_parameters()]
    return {"program": "torchtune2172_token_scale", "fix": fix, "class": "divisor_mismatch",
            "all": _truth.summarize(results)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
