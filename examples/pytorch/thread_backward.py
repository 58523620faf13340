"""A training step on a thread of the program, whose gradient offload races with backward. A
trainer thread runs forward and backward, then offloads each gradient to pinned host memory on a
stream of its own, without that stream waiting for the one backward ran on: the copy may read a
gradient while backward still writes it. Backward's kernels are issued by autograd's device
thread while the trainer waits in loss.backward(), so they are the trainer's work and the race
names that line. --fix: the offload stream waits for the current stream first. Ground truth (GPU
only, no shardcheck): CUDA's documented stream semantics; the measurement to run is in
examples/pytorch/README.md.
"""

import sys
import threading

import torch
import torch.distributed as dist

from _launch import finish, init

FIX = "--fix" in sys.argv


def train(model, data, grads):
    offload = torch.cuda.Stream()
    loss = model(data).square().mean()
    loss.backward()
    if FIX:
        offload.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(offload):
        for p, host in zip(model.parameters(), grads):
            host.copy_(p.grad, non_blocking=True)  # may read a gradient backward still writes
    offload.synchronize()


def main():
    rank, world = init()
    model = torch.nn.Linear(2048, 2048, device="cuda")
    data = torch.randn(512, 2048, device="cuda")
    grads = [torch.empty(p.shape, pin_memory=True) for p in model.parameters()]
    trainer = threading.Thread(target=train, args=(model, data, grads), name="trainer")
    trainer.start()
    trainer.join()
    total = torch.tensor([float(g.sum()) for g in grads], device="cuda")
    dist.all_reduce(total)
    finish()


if __name__ == "__main__":
    main()
