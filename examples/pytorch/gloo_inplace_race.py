"""An in-place update that races with an asynchronous gloo all-reduce. gloo reduces a CUDA
tensor on the host: it copies the tensor out on a stream of its own, a worker thread waits for
that copy, reduces, and writes the result back on its stream; wait() makes the caller's stream
wait for the write-back. Here the gradient is clipped in place before wait(), so the clip races
with gloo's copy-out and write-back (on CPU, with the worker thread's in-place reduction). --fix:
wait() first. A GPU run needs EXAMPLE_BACKEND=gloo. Ground truth (--check-truth OUT.json, CPU, no
shardcheck): each step's tensor after wait() against the ranks' sum and that sum clipped: the
bug ends steps with other values (sums of clipped gradients); --fix's reduction is always exact.
"""

import sys

import torch
import torch.distributed as dist

from _launch import device, finish, init

FIX = "--fix" in sys.argv


def main():
    rank, world = init()
    grad = torch.empty(1 << 16, device=device())
    for step in range(2):
        grad.normal_().mul_(rank + 1)  # backward's gradient: different on every rank
        work = dist.all_reduce(grad, async_op=True)
        if FIX:
            work.wait()
        grad.clamp_(-1.0, 1.0)  # clipped in place: gloo may still copy it out, or write back
        if not FIX:
            work.wait()
    if grad.is_cuda: torch.cuda.synchronize()  # noqa: E701  (one line: the lines are pinned)
    finish()


if __name__ == "__main__":
    main()
