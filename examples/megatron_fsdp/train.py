"""Megatron-FSDP v2 (megatron_fsdp.experimental.fully_shard) training a small model for 3
steps. --strategy optim_grads: parameters replicated, gradients and optimizer state sharded
(ZeRO-2); --strategy optim_grads_params (the default): everything sharded (ZeRO-3), the only
strategy fully_shard runs at the code of Megatron-LM #6187 (its unshard requires sharded
parameters: "FSDP parameter unshard requires a changed placement axis").

Needs Megatron-LM's megatron_fsdp package on the path (its experimental/ folder and
mixed_precision.py are all it imports), e.g.
    PYTHONPATH=python:$MEGATRON/megatron/core/distributed/fsdp/src \
      python3 -m shardcheck.capture --out captures/mfsdp -- examples/megatron_fsdp/train.py
"""

import os
import sys

import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
from _launch import finish, init  # noqa: E402

from megatron_fsdp.experimental import (  # noqa: E402
    Flat,
    Placements,
    Replicate,
    fully_shard,
    fully_shard_context,
    fully_shard_optimizer,
)
from megatron_fsdp.mixed_precision import MixedPrecisionPolicy  # noqa: E402


def main():
    strategy = "optim_grads" if "--strategy=optim_grads" in sys.argv else "optim_grads_params"
    rank, world = init()
    mesh = init_device_mesh("cuda", (world,))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)]).cuda()
    parameter = [Replicate()] if strategy == "optim_grads" else [Flat()]
    placements = Placements(dp_axes=[0], parameter=parameter, gradient=[Flat()],
                            optimizer=[Flat()])
    policy = MixedPrecisionPolicy(main_params_dtype=torch.float32,
                                  main_grads_dtype=torch.float32)
    with fully_shard_context():
        for block in model:
            fully_shard(block, mesh=mesh, placements=placements, mixed_precision_policy=policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    fully_shard_optimizer(optimizer)
    for step in range(3):
        x = torch.randn(32, 256, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    finish()


if __name__ == "__main__":
    main()
