"""A small model trained for 3 steps with FSDP2 (torch.distributed.fsdp.fully_shard)."""

import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

from _launch import finish, init


def main():
    rank, world = init()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)]).cuda()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x = torch.randn(32, 256, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    finish()


if __name__ == "__main__":
    main()
