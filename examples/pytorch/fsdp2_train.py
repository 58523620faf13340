"""A small model trained for 3 steps with FSDP2 (torch.distributed.fsdp.fully_shard): ZeRO-3
over every rank, or with --hsdp over a 2 x (world/2) mesh (replicated across the first
dimension, sharded within the second). Ground truth: a correct program, torch 2 and GPUs only;
how it would be established is in examples/pytorch/README.md."""

import sys
import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from _launch import finish, init


def main():
    rank, world = init()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)]).cuda()
    mesh = None
    if "--hsdp" in sys.argv:
        mesh = init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
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
