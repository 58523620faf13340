"""Process-group setup shared by the examples: torchrun's environment when present, else a
one-rank group on GPU 0 (so each example also runs as `python3 example.py`). NCCL by default;
EXAMPLE_BACKEND=gloo runs several ranks on one GPU, which NCCL refuses. On a machine without CUDA
the examples that say so run on CPU over gloo (device())."""

import os

import torch
import torch.distributed as dist


def init():
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    local = int(os.environ["LOCAL_RANK"])
    if not torch.cuda.is_available():
        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(local % torch.cuda.device_count())
    backend = os.environ.get("EXAMPLE_BACKEND", "nccl")
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    else:
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def device():
    """Where an example's tensors go: the GPU, or the CPU where there is none."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def finish():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dist.destroy_process_group()


def _watch_for_ground_truth():
    """With --check-truth OUT.json an example of this folder that has a ground truth
    (_ground_truth.py) is watched from here, its import of this module, and writes its record
    just before its group ends. Without it nothing happens: no line above moves or changes."""
    import sys
    if "--check-truth" in sys.argv:
        import _ground_truth
        _ground_truth.watch_until_the_group_ends(sys.argv)


_watch_for_ground_truth()
