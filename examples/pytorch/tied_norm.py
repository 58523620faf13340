"""A gradient norm that counts a tied embedding twice: two pipeline stages on two ranks, the
first with the input embedding and a layer, the second with a layer and an output head tied to
the embedding (each stage keeps a copy of the shared weights, their gradients all-reduced over
both stages so the copies stay equal). Each stage sums the squared norms of its own gradients
and the two sums are all-reduced: the shared weights are in both, so the global norm counts them
twice and clipping, once the norm passes 1.0, scales by the wrong factor (Megatron-LM #7227,
NeMo-RL #3788). --fix: only the first stage counts the shared weights. CPU: over gloo.

Ground truth (--check-truth OUT.json, no shardcheck): both stages on one process with one
embedding, the same tokens; clip_grad_norm_ of its gradients. At 2 CPU ranks: the norm 1.269
times the reference's, the shared weights counted 2.0 times; --fix: 1.0. Both norms stay below
the clip threshold here, so the steps match the reference either way (test_example_truth.py).
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv
VOCAB, WIDTH, BATCH = 32, 16, 8


class Stage(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        torch.manual_seed(0)
        self.shared = torch.nn.Parameter(torch.randn(VOCAB, WIDTH) * 0.1)  # embedding = head
        torch.manual_seed(1 + rank)
        self.layer = torch.nn.Linear(WIDTH, WIDTH)  # each stage its own layer


def main():
    rank, world = init()
    assert world == 2, "two pipeline stages: run with 2 ranks"
    dev = device()
    stage = Stage(rank).to(dev)
    shared, layer = stage.shared, stage.layer
    params = [shared] + list(layer.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    data = torch.Generator().manual_seed(7)
    for step in range(3):
        tokens = torch.randint(0, VOCAB, (BATCH,), generator=data).to(dev)
        if rank == 0:  # stage 0: embedding, layer; activations to stage 1, their gradient back
            h = layer(shared[tokens])
            dist.send(h.detach(), 1)
            grad_h = torch.empty_like(h)
            dist.recv(grad_h, 1)
            h.backward(grad_h)
        else:  # stage 1: layer, head tied to the embedding
            h = torch.empty(BATCH, WIDTH, device=dev, requires_grad=True)
            dist.recv(h.data, 0)
            logits = layer(h) @ shared.t()
            loss = torch.nn.functional.cross_entropy(logits, tokens)
            loss.backward()
            dist.send(h.grad, 0)
        dist.all_reduce(shared.grad)  # the tied copies' gradients: one gradient for both
        counted = params if (rank == 0 or not FIX) else params[1:]
        sq = torch.stack([p.grad.pow(2).sum() for p in counted]).sum()
        dist.all_reduce(sq)  # the global norm over both stages
        norm = sq.sqrt()
        for p in params:
            p.grad.mul_(torch.clamp(1.0 / (norm + 1e-6), max=1.0))
        opt.step()
        opt.zero_grad()
    print("rank %d: grad norm %.6f" % (rank, norm.item()), flush=True)
    finish()


if __name__ == "__main__":
    main()
