"""Capture a PyTorch program's stream work, memory and collectives, one file per rank.

    with shardcheck.capture("DIR"):      # or: python3 -m shardcheck.capture --out DIR -- x.py
        ...

The rank and world size come from the launcher's environment (torchrun's RANK/WORLD_SIZE,
Open MPI's OMPI_COMM_WORLD_RANK/SIZE, Slurm's SLURM_PROCID/NTASKS), or from an initialized
torch.distributed. Files follow docs/capture-format.md.
"""

import contextlib
import os

from .writer import rank_file

_ENV = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def rank_and_world():
    for r, w in _ENV:
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return 0, 1


class Capture:
    def __init__(self, out_dir, device=None, argv=None):
        self.out_dir = out_dir
        self.device = device
        self.argv = argv
        self.recorder = None
        self._hooks = None
        self.path = None

    def __enter__(self):
        import torch

        from .hooks import Hooks
        from .recorder import Recorder

        if os.environ.get("TORCH_CUDA_SANITIZER") is not None:
            raise RuntimeError("shardcheck.capture: TORCH_CUDA_SANITIZER is set (to any value, it "
                               "turns torch's own sanitizer on): unset it to capture")
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        rank, world = rank_and_world()
        os.makedirs(self.out_dir, exist_ok=True)
        self.path = rank_file(self.out_dir, rank)
        header = {"rank": rank, "world_size": world, "torch": torch.__version__,
                  "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                  "argv": list(self.argv) if self.argv is not None else []}
        self.recorder = Recorder(self.path, header)
        self._hooks = Hooks(self.recorder, device)
        self._hooks.install()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._hooks.uninstall()
        if self._hooks.cuda:
            import torch
            torch.cuda.synchronize()
        self.recorder.close()
        return False


def capture(out_dir, device=None):
    """Context manager: records what runs inside it into out_dir/rank-<R>.jsonl."""
    return Capture(out_dir, device=device)


__all__ = ["capture", "Capture", "rank_and_world"]
