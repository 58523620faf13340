"""Megatron-FSDP v2 (megatron_fsdp.experimental.fully_shard) training a small model for 3 steps
of Adam, with fp32 main parameters and gradients, under one of its sharding strategies:

    --strategy no_shard            parameters, gradients and optimizer state replicated
    --strategy optim               ZeRO-1: optimizer state sharded
    --strategy optim_grads         ZeRO-2: gradients and optimizer state sharded
    --strategy optim_grads_params  ZeRO-3: everything sharded (the default)

on a 1-D mesh of all ranks (--mesh 1d, the default), or on a 2 x (world/2) mesh:

    --mesh hsdp    HSDP: replicated across the outer axis, the strategy within the inner one;
                   gradients stay unreduced (Partial) on the outer axis until the step's last
                   backward, which all-reduces them
    --mesh hfsdp   HFSDP: as HSDP, but the optimizer state is sharded across the outer axis
                   too, and the last backward reduce-scatters the gradients onto it

--model picks the model: `blocks` (the default), four Linear(256, 256) + ReLU blocks, or
`tinylm`, the simulator's TinyLM at the shapes of its training scenarios (vocabulary 64, hidden
16, 4 layers, sequence 8; the output projection is its own weight, as the scenarios' with
`tied_embeddings: false`), each of its units (the embedding, each block, the head) one FSDP module, as the simulator
groups them. --microbatches N accumulates N microbatches per step, marking the last with
megatron_fsdp's microbatch(context, is_last) as HSDP and HFSDP need.

Each rank prints one line at the end with the loss of each step, so that two runs (two
strategies, or two commits) can be compared rank by rank. A strategy that the loaded
megatron_fsdp does not support, or that cannot be expressed on the mesh, exits 2 before any
process group exists, saying which Megatron-LM change it needs. What runs where:

    Megatron-LM code              --mesh 1d                --mesh hsdp         --mesh hfsdp
    up to #6336 (#6187 included)  optim_grads_params only  optim_grads_params  none
    with #5972, without #6137     optim_grads_params only  optim_grads_params  optim_grads_params
    #6137 and later (HEAD too)    all four                 optim_grads,        optim_grads_params
                                                           optim_grads_params

The support is read off the API, never off a commit: #6137 added FsdpParameterGroup's
allgather_stream argument along with the unshard that accepts replicated parameters, and
#5972's reset of the outer-sharded gradient relies on the allocation stream that
DBuffer.from_local takes since #6441 (for code with #6441 but without #5972, the failure of
HFSDP's second step is caught and reported the same way).

PYTHONPATH needs two entries: the folder holding one commit's megatron_fsdp package, as
scripts/fetch-megatron-fsdp extracts it (or Megatron-LM's megatron/core/distributed/fsdp/src),
and this repository's python/ for shardcheck.capture. The whole package must be there, not
only experimental/: `import megatron_fsdp.experimental` runs megatron_fsdp/__init__.py, which
imports the v1 modules (megatron_fsdp.py, fully_shard.py, param_and_grad_buffer.py, utils.py,
...); experimental/ itself imports ..mixed_precision and, from Megatron-LM #6024 on,
..uneven_dtensor. Beyond a CUDA build of torch the package imports only `packaging`
(mixed_precision.py, utils.py); einops, Transformer Engine and apex are optional, and
Megatron-LM itself is not needed. At 4 ranks:

    scripts/fetch-megatron-fsdp COMMIT          # prints the folder, .megatron/<hex>
    PYTHONPATH=python:.megatron/<hex> python3 -m shardcheck.capture --nproc-per-node 4 \\
        --out captures/mfsdp -- examples/megatron_fsdp/train.py --strategy optim --mesh 1d
"""

import argparse
import inspect
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
from _launch import finish, init  # noqa: E402

# Each strategy's placements on the data-parallel axis it applies to (the only axis of a 1-D
# mesh, the inner one of a 2-D mesh), as (parameter, gradient, optimizer): R replicated,
# S sharded along dim 0, P partial (unreduced until the step's last backward, then averaged).
STRATEGIES = {
    "no_shard": ("no-shard", "RPR"),
    "optim": ("ZeRO-1", "RPS"),
    "optim_grads": ("ZeRO-2", "RSS"),
    "optim_grads_params": ("ZeRO-3", "SSS"),
}
# The outer axis of a 2-D mesh: parameters replicated, gradients partial until the last backward
# of a step, optimizer state replicated (HSDP) or sharded (HFSDP).
OUTER_AXIS = {"hsdp": "RPR", "hfsdp": "RPS"}
STEPS = 3


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="optim_grads_params")
    parser.add_argument("--mesh", choices=["1d", "hsdp", "hfsdp"], default="1d")
    parser.add_argument("--model", choices=["blocks", "tinylm"], default="blocks")
    parser.add_argument("--microbatches", type=int, default=1)
    parser.add_argument("--batch", type=int, default=None,
                        help="rows of a microbatch: inputs of 256 features for blocks "
                             "(default 32), sequences for tinylm (default 2)")
    args = parser.parse_args()
    if args.microbatches < 1:
        parser.error("--microbatches must be at least 1")
    if args.batch is not None and args.batch < 1:
        parser.error("--batch must be at least 1")
    return args


def placement_factories():
    """Replicate, dim-0 shard and averaging Partial placements, as this commit's fully_shard
    takes them: three callables, each returning a fresh placement."""
    try:
        # Up to Megatron-LM #6744, DBuffer has placement classes of its own, exported here; its
        # Partial takes a torch.distributed.ReduceOp.
        from megatron_fsdp.experimental import Flat, Partial, Replicate

        return Replicate, Flat, lambda: Partial(dist.ReduceOp.AVG)
    except ImportError:
        pass
    # From #6744 on, DBuffer uses DTensor's Replicate and Partial, whose reduce_op is a string.
    # Its shard is still megatron_fsdp's own Flat (a Shard(0) subclass) until #6751; from #6751
    # on Flat is no longer exported, and fully_shard takes DTensor's Shard(0), mapping it to Flat.
    from torch.distributed.tensor import Partial, Replicate, Shard

    try:
        from megatron_fsdp.experimental import Flat
    except ImportError:
        return Replicate, lambda: Shard(0), lambda: Partial("avg")
    return Replicate, Flat, lambda: Partial("avg")


def load_api():
    """The parts of megatron_fsdp this driver uses, and what the loaded code supports."""
    try:
        import megatron_fsdp
        from megatron_fsdp.experimental import (
            DBuffer,
            Placements,
            fully_shard,
            fully_shard_context,
            fully_shard_optimizer,
            microbatch,
        )
        from megatron_fsdp.experimental.parameter_group import FsdpParameterGroup
        from megatron_fsdp.mixed_precision import MixedPrecisionPolicy
    except ModuleNotFoundError as error:
        if error.name != "megatron_fsdp":
            raise
        sys.exit("train.py: no megatron_fsdp on the path: put the folder that "
                 "scripts/fetch-megatron-fsdp COMMIT prints on PYTHONPATH")
    replicate, shard, partial = placement_factories()
    group_arguments = inspect.signature(FsdpParameterGroup.__init__).parameters
    from_local_arguments = inspect.signature(DBuffer.from_local).parameters
    return SimpleNamespace(
        path=os.path.dirname(megatron_fsdp.__file__),
        Placements=Placements, MixedPrecisionPolicy=MixedPrecisionPolicy,
        fully_shard=fully_shard, fully_shard_context=fully_shard_context,
        fully_shard_optimizer=fully_shard_optimizer, microbatch=microbatch,
        placement={"R": replicate, "S": shard, "P": partial},
        # #6137 made unshard accept replicated parameters (no-shard, ZeRO-1, ZeRO-2); before it,
        # unshard raises "FSDP parameter unshard requires a changed placement axis" at the
        # first forward. The same change added this argument to the parameter group.
        replicated_parameters="allgather_stream" in group_arguments,
        # #5972 (HFSDP) re-allocates, at a step's first backward, the gradient buffer that the
        # previous step reduce-scattered onto the optimizer shard, and checks it against the
        # allocation stream that DBuffer records since #6441: code without that record has no
        # #5972. (#6441 alone is not enough; main() catches the failure of code between them.)
        allocation_stream="allocation_stream" in from_local_arguments,
    )


def unsupported(api, strategy, mesh):
    """Why the loaded megatron_fsdp cannot run STRATEGY on MESH, or None when it can.

    DBuffer changes one mesh axis per redistribution (placement.changed_mesh_axis raises on
    two), which rules out what needs two at once on any commit: finalizing gradients that are
    partial on both axes (no-shard and ZeRO-1 under HSDP or HFSDP), and gathering replicated
    parameters from optimizer state sharded on both axes (ZeRO-1 and ZeRO-2 under HFSDP)."""
    name = STRATEGIES[strategy][0]
    if mesh != "1d" and strategy in ("no_shard", "optim"):
        return (f"{name} under {mesh.upper()} would finalize gradients partial on both mesh "
                "axes in one redistribution, which DBuffer does not do; use --mesh 1d")
    if mesh == "hfsdp" and strategy != "optim_grads_params":
        return (f"{name} under HFSDP would gather replicated parameters from optimizer state "
                "sharded on both mesh axes in one redistribution, which DBuffer does not do; "
                "HFSDP runs with optim_grads_params")
    if strategy != "optim_grads_params" and not api.replicated_parameters:
        return (f"this megatron_fsdp has no {name}: its unshard requires sharded parameters "
                "(needs Megatron-LM #6137)")
    if mesh == "hfsdp" and not api.allocation_stream:
        return "this megatron_fsdp has no HFSDP (needs Megatron-LM #5972)"
    return None


def mesh_problem(mesh, world):
    if mesh != "1d" and (world < 2 or world % 2):
        return f"--mesh {mesh} needs an even number of ranks for a 2 x (world/2) mesh, not {world}"
    return None


def make_mesh(mesh, world):
    if mesh == "1d":
        return init_device_mesh("cuda", (world,))
    return init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("dp_outer", "dp_inner"))


def make_placements(api, strategy, mesh):
    """Placements over every mesh axis, outer first; fully_shard needs dp_axes to be all of
    them, in mesh order."""
    inner = STRATEGIES[strategy][1]
    axes = [inner] if mesh == "1d" else [OUTER_AXIS[mesh], inner]
    parameter, gradient, optimizer = (
        [api.placement[axis[role]]() for axis in axes] for role in range(3))
    return api.Placements(dp_axes=list(range(len(axes))), parameter=parameter,
                          gradient=gradient, optimizer=optimizer)


# TinyLM at the shapes of the simulator's training scenarios (scenarios/training/*.yaml:
# vocab 64, hidden 16, layers 4, seq 8), its parameters named as the simulator names them.
VOCAB, HIDDEN, LAYERS, SEQ, MICRO_BATCH = 64, 16, 4, 8, 2


class Block(nn.Module):
    """x + fc2(gelu(fc1(ln1(x)))), one unit of TinyLM."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.fc1 = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln1(x))))


class Head(nn.Module):
    """The final LayerNorm and the output projection. (A tied projection would read the
    embedding's weight outside the embedding's FSDP module, where ZeRO-3 has resharded it.)"""

    def __init__(self):
        super().__init__()
        self.final_ln = nn.LayerNorm(HIDDEN)
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, x):
        return self.output(self.final_ln(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = Head()

    def units(self):
        return [self.embedding, *self.layers, self.head]

    def forward(self, tokens):
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(x)
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


class Blocks(nn.Sequential):
    def __init__(self):
        super().__init__(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)])

    def units(self):
        return list(self)

    def forward(self, x):
        return super().forward(x).square().mean()

    rows = 32

    def batch(self, generator):
        return torch.randn(self.rows, 256, device="cuda", generator=generator)


TinyLM.rows = MICRO_BATCH
TinyLM.batch = lambda self, generator: torch.randint(
    VOCAB, (self.rows, SEQ), device="cuda", generator=generator)


def build(api, mesh, placements, model_name, rows=None):
    """The model on every rank from one seed (replicated placements keep each rank's own copy,
    so the copies must start equal), each unit its own FSDP module; returns the model, its
    optimizer and the FSDP context."""
    torch.manual_seed(0)
    model = (TinyLM() if model_name == "tinylm" else Blocks()).cuda()
    if rows is not None:
        model.rows = rows
    policy = api.MixedPrecisionPolicy(main_params_dtype=torch.float32,
                                      main_grads_dtype=torch.float32)
    with api.fully_shard_context() as context:
        for unit in model.units():
            api.fully_shard(unit, mesh=mesh, placements=placements, mixed_precision_policy=policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # Its step post-hook refreshes the compute weights from the updated main weights. ZeRO-1,
    # ZeRO-2 and HFSDP compute with a replicated copy of their own, which would otherwise keep
    # its initial values.
    api.fully_shard_optimizer(optimizer)
    return model, optimizer, context


def train(api, model, optimizer, context, rank, microbatches):
    """STEPS steps of MICROBATCHES microbatches; returns each step's mean loss as a float. Each
    rank draws its own data, so that a missing or wrong gradient reduction changes the losses
    (with the same data everywhere, each rank's local gradient would already be the average).
    No host sync inside the loop: a .item() per step would order every stream at each step and
    hide what a capture is for."""
    generator = torch.Generator(device="cuda").manual_seed(1000 + rank)
    losses = []
    for _ in range(STEPS):
        loss = 0
        for m in range(microbatches):
            with api.microbatch(context, is_last=m == microbatches - 1):
                part = model(model.batch(generator)) / microbatches
                part.backward()
            loss = loss + part.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


def refuse(reason, rank):
    if rank == 0:
        print(f"train.py: {reason}", file=sys.stderr, flush=True)
    sys.exit(2)


def main():
    args = parse_args()
    api = load_api()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    reason = unsupported(api, args.strategy, args.mesh) or mesh_problem(args.mesh, world)
    if reason:
        refuse(reason, rank)
    rank, world = init()
    if rank == 0:
        print(f"train.py: megatron_fsdp from {api.path}", file=sys.stderr, flush=True)
    mesh = make_mesh(args.mesh, world)
    model, optimizer, context = build(api, mesh, make_placements(api, args.strategy, args.mesh),
                                      args.model, args.batch)
    try:
        losses = train(api, model, optimizer, context, rank, args.microbatches)
    except NotImplementedError as error:
        # Code with #6441 but without #5972 runs HFSDP's first step, then cannot return the
        # gradient reduce-scattered onto the optimizer shard to its partial placement. Every
        # rank raises there, before its next collective, so the group can still be torn down.
        if args.mesh != "hfsdp":
            raise
        finish()
        refuse(f"this megatron_fsdp has no HFSDP: {error} (needs Megatron-LM #5972)", rank)
    print(f"rank {rank}/{world} model={args.model} strategy={args.strategy} mesh={args.mesh} "
          f"microbatches={args.microbatches} batch={model.rows} losses="
          + " ".join(repr(loss) for loss in losses), flush=True)
    finish()


if __name__ == "__main__":
    main()
