"""A prefetch thread that hands a batch over before its copy is done. A thread of the program
copies each batch to the GPU on a stream of its own and waits for the copy (synchronize()), but
it puts the batch into the queue first: the program's thread can take it and multiply with it
while the copy still writes it. Were every thread's waits on one host timeline, the prefetcher's
wait, made before the multiply was issued, would look like it ordered the two; on the
prefetcher's own timeline nothing does. --fix: wait for the copy, then put the batch.
Ground truth (GPU only, no shardcheck): CUDA's documented stream semantics; the measurement to
run is in examples/pytorch/README.md.
"""

import queue
import sys
import threading

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv
STEPS = 4


def prefetch(batches, ready):
    stream = torch.cuda.Stream()
    for cpu in batches:
        with torch.cuda.stream(stream):
            gpu = cpu.to("cuda", non_blocking=True)
        if not FIX:
            ready.put(gpu)  # handed over while the copy may still write it
        stream.synchronize()
        if FIX:
            ready.put(gpu)
    ready.put(None)


def main():
    rank, world = init()
    weight = torch.randn(1024, 1024, device="cuda")
    batches = [torch.randn(256, 1024).pin_memory() for _ in range(STEPS)]
    ready = queue.Queue()
    loader = threading.Thread(target=prefetch, args=(batches, ready), name="prefetch")
    loader.start()
    total = torch.zeros((), device="cuda")
    while (batch := ready.get()) is not None:
        batch.record_stream(torch.cuda.current_stream())  # used here, allocated on the loader's
        total += (batch @ weight).sum()
    loader.join()
    dist.all_reduce(total)
    finish()


if __name__ == "__main__":
    main()
