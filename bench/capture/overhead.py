"""Capture overhead on a real model: the step time of a TransformerEncoder (DDP, or FSDP2 with
--fsdp) without shardcheck.capture, with it, and with it but no value digests (--no-values'
capture), after warm-up. Rank 0 prints one JSON line. On a machine without CUDA it runs on
CPU over gloo (DDP only: torch 1.x has no fully_shard).

    torchrun --nproc-per-node 1 bench/capture/overhead.py [--layers 6] [--steps 5]
    # 4 ranks on one GPU, on the one-GPU backend (the uncaptured steps run on it too):
    PYTHONPATH=python python3 -m shardcheck.capture --nproc-per-node 4 --no-capture -- \
        bench/capture/overhead.py --fsdp
"""

import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "pytorch"))
import shardcheck  # noqa: E402
from _launch import device, finish, init  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard per layer, not DDP")
    args = p.parse_args()
    rank, world = init()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(args.width, 8, 4 * args.width, batch_first=True)
    dev = device()
    model = nn.TransformerEncoder(layer, args.layers).to(dev)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    else:
        model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 256, args.width, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def timed(n):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        return (time.perf_counter() - t0) / n

    for _ in range(3):
        step()
    plain = timed(args.steps)
    with tempfile.TemporaryDirectory() as d:
        with shardcheck.capture(d, values=False) as cap:
            no_values = timed(args.steps)
    with tempfile.TemporaryDirectory() as d:
        with shardcheck.capture(d) as cap:
            captured = timed(args.steps)
        records = cap.recorder._w.records
        values = cap.recorder.stats["values"]
        size = os.path.getsize(cap.path)
    if rank == 0:
        print(json.dumps({"model": "TransformerEncoder", "wrap": "fsdp2" if args.fsdp else "ddp",
                          "ranks": world, "layers": args.layers,
                          "width": args.width, "params": sum(q.numel() for q in model.parameters()),
                          "steps": args.steps, "plain_ms": round(plain * 1e3, 2),
                          "captured_ms": round(captured * 1e3, 2),
                          "ratio": round(captured / plain, 2),
                          "captured_no_values_ms": round(no_values * 1e3, 2),
                          "values_cost": round(captured / no_values, 2),
                          "value_records_per_step": values // args.steps,
                          "records_per_step": records // args.steps,
                          "bytes_per_step": size // args.steps,
                          "process_group": type(dist.distributed_c10d._get_default_group()).__name__,
                          "torch": torch.__version__,
                          "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}))
    finish()


if __name__ == "__main__":
    main()
