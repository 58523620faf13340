"""Strategy equivalence the way it is tested today: torch.distributed on gloo, 4 CPU processes.

The peer of `shardcheck compare scenarios/training/zero1-exact.yaml --against distopt`, written
as the unit tests of Megatron-LM's distributed optimizer are: start one process per rank,
build the same model on every rank from one seed, train it once with a sharded optimizer and
once with the unsharded baseline on identical data, and assert that the parameters are equal
after every step.

Same shape as the shardcheck side: TinyLM (bench/peer/tinylm_torch.py: vocab 64, hidden 16,
4 layers, seq 8, tied embeddings), 4 data-parallel ranks, 4 microbatches of 2 sequences per
step with gradient accumulation under no_sync, gradient clipping at 1.0, Adam (lr 1e-3, betas
0.9/0.95, eps 1e-8), 3 steps. The sharded strategy is ZeRO-1: DistributedDataParallel with
torch's ZeroRedundancyOptimizer (optimizer state partitioned across ranks, updated parameters
broadcast from their owners). The baseline is DistributedDataParallel with a replicated Adam.

    /usr/bin/python3 bench/peer/gloo_equivalence.py [--json out.json]

Prints one JSON line: check_s (rank 0, from the process group being up to the last assertion
passing), setup_s (process start to the process group being up), and what was checked. Exits
non-zero when any parameter differs.
"""
import argparse
import contextlib
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tinylm_torch import TinyLM  # noqa: E402  (the model the GPU comparison uses too)

WORLD_SIZE = 4
VOCAB, HIDDEN, LAYERS, SEQ = 64, 16, 4, 8
MICROBATCHES, MICRO_BATCH_SIZE, STEPS = 4, 2, 3
MODEL_SEED, DATA_SEED = 1234, 7
ADAM = dict(lr=1.0e-3, betas=(0.9, 0.95), eps=1.0e-8, weight_decay=0.0)


def initialize_distributed(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def destroy_distributed():
    dist.barrier()
    dist.destroy_process_group()


def build_model():
    torch.manual_seed(MODEL_SEED)
    return DDP(TinyLM(VOCAB, HIDDEN, LAYERS))


def make_batches(rank):
    """Each data-parallel rank draws its own microbatches; both runs see the same ones."""
    gen = torch.Generator().manual_seed(DATA_SEED * 1000 + rank)
    shape = (MICRO_BATCH_SIZE, SEQ)
    return [[(torch.randint(0, VOCAB, shape, generator=gen), torch.randint(0, VOCAB, shape, generator=gen))
             for _ in range(MICROBATCHES)] for _ in range(STEPS)]


def train_step(model, optimizer, microbatches):
    for i, (tokens, targets) in enumerate(microbatches):
        last = i == len(microbatches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = model(tokens, targets) / len(microbatches)
            loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def train(make_optimizer, batches):
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    after_each_step = []
    for step in range(STEPS):
        train_step(model, optimizer, batches[step])
        after_each_step.append(snapshot(model))
    return model, after_each_step


def test_zero1_matches_unsharded_adam(rank, world_size, port, result_path):
    t0 = time.perf_counter()
    torch.set_num_threads(1)  # four processes share the machine's cores
    initialize_distributed(rank, world_size, port)
    dist.barrier()
    t1 = time.perf_counter()

    batches = make_batches(rank)
    names = [n for n, _ in build_model().module.named_parameters()]
    _, sharded = train(lambda params: ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, **ADAM), batches)
    _, baseline = train(lambda params: torch.optim.Adam(params, **ADAM), batches)
    for step in range(STEPS):
        for name, a, b in zip(names, sharded[step], baseline[step]):
            assert torch.equal(a, b), f"rank {rank}: {name} differs after step {step}: max |diff| {(a - b).abs().max()}"
    dist.barrier()
    t2 = time.perf_counter()

    if rank == 0:
        result = {"check_s": t2 - t1, "setup_s": t1 - t0, "ranks": world_size, "steps": STEPS,
                  "parameters": len(names), "strategy": "ZeroRedundancyOptimizer(Adam) vs Adam, DDP on gloo",
                  "torch": torch.__version__, "equal": True}
        with open(result_path, "w") as f:
            json.dump(result, f)
    destroy_distributed()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="", help="also write the result to this file")
    a = p.parse_args()
    result_path = a.json or f"/tmp/gloo_equivalence.{os.getpid()}.json"
    mp.spawn(test_zero1_matches_unsharded_adam, args=(WORLD_SIZE, free_port(), result_path), nprocs=WORLD_SIZE)
    with open(result_path) as f:
        result = json.load(f)
    if not a.json:
        os.remove(result_path)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
