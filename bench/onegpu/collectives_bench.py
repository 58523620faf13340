"""Throughput of all_gather_into_tensor and reduce_scatter_tensor (f32, SUM) by size: on the
one-GPU backend at N ranks, or on NCCL at one rank (the only NCCL a one-GPU machine runs).
Rank 0 prints one JSON line per collective and size: the gathered (or scattered) bytes, the
median time of one call over the timed iterations, and that size over that time.

    python3 bench/onegpu/collectives_bench.py                       # NCCL, one rank
    PYTHONPATH=python python3 -m shardcheck.capture --nproc-per-node 4 --no-capture -- \\
        bench/onegpu/collectives_bench.py                           # the backend, 4 ranks
"""

import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist


def timed(fn, iters):
    """Median milliseconds of one call, each timed with events on the caller's stream (every
    collective here is async_op=False: it runs on that stream)."""
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mib", default="1,4,16,64,256")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531")):
        os.environ.setdefault(k, v)
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = type(dist.distributed_c10d._get_default_group()).__name__
    for mib in (int(x) for x in args.sizes_mib.split(",")):
        n = (mib << 20) // 4 // world * world
        full = torch.randn(n, device="cuda")
        part = torch.randn(n // world, device="cuda")
        cases = {"all_gather_into_tensor": lambda: dist.all_gather_into_tensor(full, part),
                 "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(part, full)}
        for name, fn in cases.items():
            for _ in range(3):
                fn()
            dist.barrier()
            ms = timed(fn, args.iters)
            if rank == 0:
                print(json.dumps({"collective": name, "ranks": world, "process_group": backend,
                                  "bytes": n * 4, "median_ms": round(ms, 4),
                                  "gb_per_s": round(n * 4 / ms / 1e6, 2),
                                  "torch": torch.__version__,
                                  "device": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
