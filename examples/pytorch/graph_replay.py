"""A CUDA graph replayed while its static input is still being written. The forward is captured
once into a CUDA graph over a static input; each step a loader stream copies the next batch into
that input, and the graph is replayed on the default stream, which does not wait for the loader
stream: the graph's first kernel may read the input while the copy still writes it. --fix: the
default stream waits for the loader stream before each replay. Ground truth (GPU only, no
shardcheck): a replay is ordered only on the stream it is launched on (CUDA's documented graph
launch); the measurement to run is in examples/pytorch/README.md.
"""

import sys

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    n = 1 << 10
    weight = torch.randn(n, n, device="cuda")
    static_x = torch.zeros(64, n, device="cuda")
    batches = [torch.randn(64, n, device="cuda") for _ in range(3)]
    # Warm up on a side stream, as torch.cuda.graph asks, then capture.
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        torch.relu(static_x @ weight)
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = torch.relu(static_x @ weight)
    loader = torch.cuda.Stream()
    total = torch.zeros((), device="cuda")
    for batch in batches:
        loader.wait_stream(torch.cuda.current_stream())  # the last replay has read static_x
        with torch.cuda.stream(loader):
            static_x.copy_(batch)  # the next batch into the graph's input
        if FIX:
            torch.cuda.current_stream().wait_stream(loader)
        graph.replay()  # reads static_x
        total += static_y.sum()
    dist.all_reduce(total)
    torch.cuda.synchronize()
    finish()


if __name__ == "__main__":
    main()
