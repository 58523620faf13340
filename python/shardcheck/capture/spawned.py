"""Ranks a program starts itself: `torch.multiprocessing.spawn(fn, nprocs=N)` (the pattern of
PyTorch's DDP tutorial) or `start_processes`. Each process it starts is captured into the same
folder as rank <i>, its index, as the launcher's ranks are; the process that called spawn is
only their launcher, and leaves no file of its own.

Without this, such a program's ranks ran uncaptured and the folder held one file of the
launching process, with no collective: a clean verdict on a program nothing had seen.
"""

import os
import sys

_SPAWN_MODULE = "torch.multiprocessing.spawn"


class SpawnedRank:
    """The function each started process runs, fn(i, *args), under a capture of its own
    (pickled to the process: everything here is plain data)."""

    def __init__(self, fn, out_dir, device, argv, timeout, values, nprocs):
        self.fn = fn
        self.out_dir = out_dir
        self.device = device
        self.argv = argv
        self.timeout = timeout
        self.values = values
        self.nprocs = nprocs

    def __call__(self, i, *args):
        from . import Capture
        from . import hooks
        hooks._Quiet.forked = False  # a started rank (start_method="fork") is no worker
        # The one-GPU backend takes over where more ranks share a machine than it has GPUs.
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(self.nprocs))
        with Capture(self.out_dir, device=self.device, argv=self.argv, timeout=self.timeout,
                     values=self.values, rank=(i, self.nprocs)):
            return self.fn(i, *args)


class Starter:
    """Patches start_processes (which spawn calls) while the capture `cap` runs."""

    def __init__(self, cap):
        self.cap = cap
        self.started = 0  # processes started under the capture
        self._undo = []

    def install(self):
        module = sys.modules.get(_SPAWN_MODULE)
        if module is None:
            try:
                __import__(_SPAWN_MODULE)
            except ImportError:
                return
            module = sys.modules[_SPAWN_MODULE]
        orig = module.start_processes
        wrapped = self._wrap(orig)
        import torch.multiprocessing as mp
        for owner in (module, mp):
            if getattr(owner, "start_processes", None) is orig:
                self._undo.append((owner, orig))
                owner.start_processes = wrapped

    def uninstall(self):
        for owner, orig in reversed(self._undo):
            owner.start_processes = orig
        self._undo = []

    def _wrap(self, orig):
        starter = self

        def start_processes(fn, args=(), nprocs=1, join=True, daemon=False,
                            start_method="spawn"):
            if starter.started:
                print("shardcheck.capture: a second start_processes: its processes run "
                      "uncaptured (the folder holds the first's ranks)", file=sys.stderr,
                      flush=True)
                return orig(fn, args, nprocs, join, daemon, start_method)
            cap = starter.cap
            cap.hand_over()  # the folder is the started ranks' from here on
            starter.started = nprocs
            rank = SpawnedRank(fn, cap.out_dir, cap.device, cap.argv, cap.timeout,
                               cap.values, nprocs)
            return orig(rank, args, nprocs, join, daemon, start_method)
        return start_processes
