"""A small model trained for 3 steps (--steps N: N) with DistributedDataParallel over NCCL.
Ground truth: a correct program, GPU only; examples/pytorch/README.md says how it would be held."""

import sys
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from _launch import finish, init


def main():
    rank, world = init()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).cuda()
    model = DDP(model, bucket_cap_mb=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
    for step in range(steps):
        x = torch.randn(32, 256, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    finish()


if __name__ == "__main__":
    main()
