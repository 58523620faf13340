"""Megatron-LM PR #7227 ("Fix MFSDP v2 shared gradient norms"; also #7228): with pipeline
parallelism the tied input embedding and output weight exist as two parameters, the first
stage's embedding and the last stage's copy that `LanguageModule` marks `shared = True`;
finalize_model_grads all-reduces their gradients over the two stages so both hold the one
gradient. Megatron-FSDP v2's `get_grad_norm` summed the squares of every optimizer parameter,
both copies included, and all-reduced the sum over the stages: the tied weight counted twice, the
norm sqrt(2) too large where it dominates ("40 (sqrt(1600)) instead of approximately 28.284
(sqrt(800))"), and gradients over-clipped. The fix applies MCore's shared-parameter filter.

Here, 2 pipeline stages on 2 ranks: stage 0 an embedding (20 x 8) and a layer, stage 1 a layer
and the output projection with the stage's copy of the embedding; activations sent forward and
their gradients back; the copies' gradients all-reduced over both stages; the norm summed over
each stage's parameters and all-reduced over the stages; clipping to 0.1.

The bug: both copies of the tied weight are in the norm: its squares count twice. --fix leaves
out the parameters marked `shared`.

Ground truth (--check-truth OUT): one process runs both stages with one embedding on the same
tokens; torch.nn.utils.clip_grad_norm_ of its gradients is the norm. Bug: the tied weight counts
2 times in the norm; fix: the norm matches.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _truth

RANKS = 2
VOCAB, HIDDEN, TOKENS, MAX_NORM = 20, 8, 10, 0.1


def initial():
    torch.manual_seed(0)
    return {"embedding": torch.randn(VOCAB, HIDDEN) * 0.5,
            "layers": [torch.nn.Linear(HIDDEN, HIDDEN).state_dict() for _ in range(2)]}


class Stage(torch.nn.Module):
    def __init__(self, stage: int) -> None:
        super().__init__()
        w = initial()
        self.word_embeddings = torch.nn.Parameter(w["embedding"].clone())  # stage 1: the output copy
        self.layer = torch.nn.Linear(HIDDEN, HIDDEN)
        self.layer.load_state_dict(w["layers"][stage])
        if stage == 1:
            self.word_embeddings.shared = True  # LanguageModule's mark on the duplicate
        self.word_embeddings.shared_embedding = True


def get_grad_norm(params, fix: bool) -> torch.Tensor:
    if fix:  # the fix: MCore's filter, one copy of a shared parameter
        params = [p for p in params if not getattr(p, "shared", False)]
    total = torch.stack([p.grad.pow(2).sum() for p in params if p.grad is not None]).sum()
    dist.all_reduce(total)  # over the grad-stats group: both stages
    return total.sqrt()


def train(fix: bool, probe: _truth.Probe) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "two pipeline stages: run with 2 ranks"
    dev = _truth.device()
    stage = Stage(rank).to(dev)
    params = list(stage.parameters())
    opt = torch.optim.SGD(params, lr=0.5)
    probe.watch(opt, stage.named_parameters())
    data = torch.Generator().manual_seed(1500)  # both stages know the tokens
    for step in range(2):
        tokens = torch.randint(0, VOCAB, (TOKENS,), generator=data).to(dev)
        probe.batch(tokens)
        if rank == 0:
            h = torch.tanh(stage.layer(stage.word_embeddings[tokens]))
            dist.send(h.detach(), 1)
            grad_h = torch.empty_like(h)
            dist.recv(grad_h, 1)
            h.backward(grad_h)
        else:
            h = torch.empty(TOKENS, HIDDEN, device=dev)
            dist.recv(h, 0)
            h.requires_grad_()
            logits = torch.tanh(stage.layer(h)) @ stage.word_embeddings.t()
            loss = F.cross_entropy(logits, tokens)
            loss.backward()
            dist.send(h.grad, 0)
        dist.all_reduce(stage.word_embeddings.grad)  # finalize_model_grads: the embedding group
        norm = get_grad_norm(params, fix)
        probe.note("norm", norm.item())
        coef = torch.clamp(MAX_NORM / (norm + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(coef)
        opt.step()
        opt.zero_grad()
    print("rank %d: grad norm %.6f" % (rank, norm.item()), flush=True)


def reference(tokens):
    w = initial()
    emb = w["embedding"].double().requires_grad_()
    layers = [torch.nn.Linear(HIDDEN, HIDDEN).double() for _ in range(2)]
    for layer, state in zip(layers, w["layers"]):
        layer.load_state_dict(state)
    h = torch.tanh(layers[1](torch.tanh(layers[0](emb[tokens]))))
    F.cross_entropy(h @ emb.t(), tokens).backward()
    params = [emb] + [p for layer in layers for p in layer.parameters()]
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf"))), float(emb.grad.norm())


def truth(probe: _truth.Probe, fix: bool):
    norms = _truth.gather(probe.notes["norm"][0])
    if dist.get_rank() != 0:
        return None
    ref, tied = reference(probe.batches[0][0])
    return {"program": "megatron7227_tied_pp_norm", "fix": fix, "class": "grad_norm_miscount",
            "norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref,
            "norm_ratio": round(norms[0] / ref, 6),
            "tied_counted": round((norms[0] ** 2 - ref ** 2) / tied ** 2 + 1, 4)}


def run(opts: _truth.Options):
    probe = _truth.Probe(opts.truth is not None)
    train(opts.fix, probe)
    return truth(probe, opts.fix) if opts.truth else None


if __name__ == "__main__":
    _truth.main(run)
