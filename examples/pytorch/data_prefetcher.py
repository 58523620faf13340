"""A data prefetcher that copies the next batch on a stream of its own (the familiar one from
image-classification training scripts), without record_stream. Each batch is made by the copy on
the prefetcher's stream, so its block belongs to that stream. The loop waits for the copy, then
uses the batch on the default stream; when it drops the batch, the allocator gives the block
back to the prefetcher's stream at once, and the copy of a later batch may take it while the
default stream still reads the old one. --fix: record_stream on the stream that uses the batch.
Ground truth (GPU only, no shardcheck): record_stream's documented semantics; the measurement
to run is in examples/pytorch/README.md.
"""

import sys

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv
STEPS = 6


class Prefetcher:
    def __init__(self, batches):
        self.batches = iter(batches)
        self.stream = torch.cuda.Stream()
        self.preload()

    def preload(self):
        cpu = next(self.batches, None)
        self.next_batch = None
        if cpu is not None:
            with torch.cuda.stream(self.stream):
                self.next_batch = cpu.to("cuda", non_blocking=True)

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        batch = self.next_batch
        if batch is not None and FIX:
            batch.record_stream(torch.cuda.current_stream())
        self.preload()
        return batch


def main():
    rank, world = init()
    weight = torch.randn(2048, 2048, device="cuda")
    batches = [torch.randn(1024, 2048).pin_memory() for _ in range(STEPS)]
    loader = Prefetcher(batches)
    total = torch.zeros((), device="cuda")
    batch = loader.next()
    while batch is not None:
        total += (batch @ weight).relu().sum()  # reads the batch on the default stream
        batch = loader.next()
    dist.all_reduce(total)
    finish()


if __name__ == "__main__":
    main()
