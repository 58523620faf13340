"""bytetriper/RAE #40 ("Potential bug in DDP grad allreduce"): the stage-1 trainer wraps the
autoencoder in DistributedDataParallel but runs the forward through the unwrapped module
(`model_woddp.decode(...)`). DDP prepares its gradient reduction in its own forward; a backward
that did not come from it reduces nothing, so every rank steps with its own gradient and the
replicas train apart, silently. The issue's remedy: run the forward through the DDP wrapper.

Here, 2 ranks: a frozen encoder (latents of 8 from images of 3 x 4 x 4) and a decoder (8 -> 24,
SiLU, 24 -> 48) trained to reconstruct the image, wrapped in DDP; each rank its own images.

The bug: `model_woddp.decode(latent)`: the decoder's gradients are never all-reduced, each rank
steps with its own, and the decoder's copies differ from the first step. --fix calls the DDP
module, whose forward is the decode, so DDP averages the gradients.

Ground truth (--check-truth OUT): one process decodes both ranks' images with the same initial
weights and backpropagates the mean of the two losses; each rank's gradients at the first step are
compared with it, and the decoder's copies across the ranks after the last step. Bug: large
residual, copies apart; fix: factor 1, copies bit for bit the same.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import _truth

RANKS = 2
LATENT, HIDDEN, PIXELS, IMAGES = 8, 24, 3 * 4 * 4, 4


class RAE(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(PIXELS, LATENT)
        self.encoder.requires_grad_(False)  # a frozen representation encoder
        self.decoder = torch.nn.Sequential(torch.nn.Linear(LATENT, HIDDEN), torch.nn.SiLU(),
                                           torch.nn.Linear(HIDDEN, PIXELS))

    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        return self.decoder(z)

    def forward(self, z):
        return self.decode(z)


def train(fix: bool, probe: _truth.Probe) -> None:
    rank = dist.get_rank()
    dev = _truth.device()
    model = DDP(RAE().to(dev))
    model_woddp = model.module
    opt = torch.optim.Adam(model_woddp.decoder.parameters(), lr=1e-2)
    probe.watch(opt, model_woddp.decoder.named_parameters())
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own images
    for step in range(3):
        images = torch.rand(IMAGES, PIXELS, generator=data).to(dev)
        probe.batch(images)
        with torch.no_grad():
            latent = model_woddp.encode(images)
        recon = model(latent) if fix else model_woddp.decode(latent)  # the bug: around DDP
        loss = F.mse_loss(recon, images)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("rank %d: loss %.5f" % (rank, loss.item()), flush=True)


def truth(probe: _truth.Probe, fix: bool):
    rows = _truth.gather({"grads": probe.grads, "initial": probe.initial, "batch": probe.batches[0],
                          "after": probe.params[-1]})
    if dist.get_rank() != 0:
        return None
    model = RAE().double()
    model.decoder.load_state_dict(rows[0]["initial"])
    losses = [F.mse_loss(model.decode(model.encode(r["batch"][0])), r["batch"][0]) for r in rows]
    torch.stack(losses).mean().backward()
    ref = dict(model.decoder.named_parameters())
    results = [_truth.compare(row["grads"][n], ref[n].grad) for row in rows for n in ref]
    spread = {n: _truth.replica_spread([row["after"][n] for row in rows]) for n in ref}
    return {"program": "rae40_unwrapped_forward", "fix": fix, "class": "missing_reduction",
            "decoder": _truth.summarize(results), "replica_spread": spread}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
