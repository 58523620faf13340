"""A reuse race across two freed blocks that the caching allocator coalesced. Two gradient
buckets of 4 MiB are allocated one after the other on the compute stream (they sit side by side
in one 20 MiB segment of the large pool), all-reduced on a side stream, and freed on the host as
soon as the side stream's work is queued. Freed together, the two blocks merge with the free
rest of their segment; the next allocation of the compute stream, an 8 MiB activation, is handed
the merged block at the first bucket's address and spans both buckets, so the activation's write
may overwrite either bucket while the side stream still reduces it. --fix: record_stream(side)
on both buckets before the free. Ground truth (GPU only, no shardcheck): the printed overlap and
the allocator's documented reuse; the measurement to run is in examples/pytorch/README.md.
"""

import sys

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    n = 1 << 20  # 4 MiB of float32 a bucket
    weight = torch.randn(n, device="cuda")
    side = torch.cuda.Stream()
    compute = torch.cuda.current_stream()
    for step in range(2):
        first = weight * 2.0  # the first bucket's gradients
        second = weight * 3.0  # the second bucket's, in the block after it
        side.wait_stream(compute)
        with torch.cuda.stream(side):
            dist.all_reduce(first)  # the side stream reads and writes both buckets
            dist.all_reduce(second)
            if FIX:
                first.record_stream(side)
                second.record_stream(side)
        spans = first.data_ptr(), second.data_ptr() + second.numel() * 4
        del first, second  # freed on the host while the side stream may still use them
        act = torch.empty(2 * n, device="cuda")  # one block over both buckets
        act.fill_(1.0)  # the compute stream overwrites it
        if rank == 0 and step == 0:
            where = act.data_ptr(), act.data_ptr() + act.numel() * 4
            print("activation spans both buckets:", where == spans, flush=True)
        compute.wait_stream(side)
        weight.add_(act[:n], alpha=1e-3)
    finish()


if __name__ == "__main__":
    main()
