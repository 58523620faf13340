"""The caching-allocator reuse race of Megatron-LM #6137, written plainly in PyTorch. Each step
the gradient buffer is allocated on the compute stream, scaled and reduce-scattered on a side
stream, and freed on the host as soon as the side stream's work is queued. The caching allocator
hands its block to the next allocation on the compute stream, whose kernel may overwrite it while
the side stream still reads it. --fix: grad.record_stream(side) before the free. Ground truth
(GPU only, no shardcheck): record_stream's documented semantics; the measurement to run (the
shard under a delayed side stream) is in examples/pytorch/README.md.
"""

import sys

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    n = 1 << 22
    weight = torch.randn(n, device="cuda")
    side = torch.cuda.Stream()
    compute = torch.cuda.current_stream()
    for step in range(2):
        grad = torch.empty(n, device="cuda")  # allocated on the compute stream
        torch.mul(weight, 2.0, out=grad)  # backward writes the gradient
        shard = torch.empty(n // world, device="cuda")
        side.wait_stream(compute)
        with torch.cuda.stream(side):
            scaled = grad * (1.0 / world)  # the side stream reads grad
            dist.reduce_scatter_tensor(shard, scaled)
            if FIX:
                grad.record_stream(side)
        del grad  # freed on the host while the side stream may still read it
        act = torch.empty(n, device="cuda")  # the compute stream's next allocation reuses the block
        act.copy_(weight)  # and overwrites it
        compute.wait_stream(side)
        weight -= shard.sum() * act[0]
    finish()


if __name__ == "__main__":
    main()
