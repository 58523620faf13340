"""Two branches of one CUDA graph that race inside it. The step is captured once into a CUDA
graph with a second branch on a side stream, which computes the norm of the projection while the
capture stream goes on. The side stream forks before the projection is written, so inside the
graph nothing orders the norm's read after the projection's write: every replay may read the
projection while it is being written. --fix: fork after the projection. Ground truth (GPU only,
no shardcheck): a graph keeps only the dependencies its capture recorded (CUDA's documented
stream capture); the measurement to run is in examples/pytorch/README.md.
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
    static_x = torch.randn(256, n, device="cuda")
    side = torch.cuda.Stream()
    # Warm up on a side stream, as torch.cuda.graph asks, then capture.
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        (static_x @ weight).norm()
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if not FIX:
            side.wait_stream(torch.cuda.current_stream())  # forks before the projection
        proj = static_x @ weight
        if FIX:
            side.wait_stream(torch.cuda.current_stream())  # forks after it
        with torch.cuda.stream(side):
            norm = proj.norm()  # the side branch reads the projection
        torch.cuda.current_stream().wait_stream(side)  # joins
        out = torch.relu(proj)
    total = torch.zeros((), device="cuda")
    for step in range(3):
        static_x.normal_()
        graph.replay()
        total += out.sum() / norm
    dist.all_reduce(total)
    torch.cuda.synchronize()
    finish()


if __name__ == "__main__":
    main()
