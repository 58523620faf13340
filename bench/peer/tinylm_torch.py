"""TinyLM in PyTorch, for one number: the step time of the same model and step that
shardcheck's CUDA backend runs, on the same GPU, one rank.

Same model as core/train/tinylm_exec.cpp: a tied embedding V x H, L pre-LayerNorm blocks of
Linear(H, 4H) -> GELU(tanh) -> Linear(4H, H) with a residual, a final LayerNorm, softmax
cross-entropy. Same step: 4 microbatches of forward and backward (loss scaled by 1/4),
gradient clipping at 1.0, AdamW (betas 0.9, 0.95). Mixed precision as PyTorch users write it:
fp32 parameters with torch.autocast(bfloat16) for the matrix products.

--compile runs the model under torch.compile. --one-batch is the step as a PyTorch user tunes
it: the microbatches' sequences as one batch (no accumulation), bf16 autocast and fused AdamW.
The result (one JSON line, and --out FILE) holds every timed step, their median, minimum and
maximum, and the model FLOPs of one step (6 per token per matrix parameter), so MFU can be
stated against a measured peak.

    python3 tinylm_torch.py --vocab 8192 --hidden 1024 --layers 8 --seq 1024 --mbs 2 --microbatches 4
    python3 tinylm_torch.py --compile --one-batch --out torch.json
"""
import argparse
import json
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.ln = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x)), approximate="tanh"))


class TinyLM(nn.Module):
    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(layers))
        self.final_ln = nn.LayerNorm(hidden)

    def forward(self, tokens, targets):
        x = self.embedding(tokens)
        for b in self.blocks:
            x = b(x)
        logits = self.final_ln(x) @ self.embedding.weight.t()  # tied output projection
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--mbs", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--one-batch", action="store_true",
                   help="all microbatches as one batch, bf16 autocast, fused AdamW")
    p.add_argument("--out", default="")
    a = p.parse_args()
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    model = TinyLM(a.vocab, a.hidden, a.layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                            fused=a.one_batch)
    run = torch.compile(model) if a.compile else model
    gen = torch.Generator(device=dev).manual_seed(7)
    batches = [
        (torch.randint(0, a.vocab, (a.mbs, a.seq), device=dev, generator=gen),
         torch.randint(0, a.vocab, (a.mbs, a.seq), device=dev, generator=gen))
        for _ in range(a.microbatches)
    ]
    if a.one_batch:  # the same sequences, one batch of mbs * microbatches
        batches = [(torch.cat([t for t, _ in batches]), torch.cat([g for _, g in batches]))]
    times = []
    for step in range(a.steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for tokens, targets in batches:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(tokens, targets) / len(batches)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stop.record()
        torch.cuda.synchronize()
        if step >= a.warmup:  # warm-up: allocator, cuBLAS heuristics, kernel loading, compilation
            times.append(start.elapsed_time(stop))
    tokens_per_step = a.mbs * a.microbatches * a.seq
    flops = 6.0 * tokens_per_step * (a.layers * 8.0 * a.hidden * a.hidden + a.vocab * a.hidden)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "mode": ("one_batch" if a.one_batch else "microbatches") + ("_compile" if a.compile else "_eager"),
              "compile": a.compile, "one_batch": a.one_batch, "fused_adamw": a.one_batch,
              "vocab": a.vocab, "hidden": a.hidden, "layers": a.layers, "seq": a.seq, "mbs": a.mbs,
              "microbatches": a.microbatches, "tokens_per_step": tokens_per_step, "model_flops_per_step": flops,
              "ms_per_step_median": statistics.median(times), "ms_per_step_min": min(times),
              "ms_per_step_max": max(times), "steps_timed": len(times), "ms_per_step": times}
    print(json.dumps(result))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
