"""Ranks a program starts itself: `torch.multiprocessing.spawn(fn, nprocs=N)` (the pattern of
PyTorch's DDP tutorial) or `start_processes`. Each process it starts is captured into the same
folder as rank <i>, its index, as the launcher's ranks are; the process that called spawn is
only their launcher, and leaves no file of its own.

A `multiprocessing.Process` the program starts itself (the pattern of PyTorch's "Writing
distributed applications" tutorial: a Process per rank, each calling init_process_group) is
captured from the moment it calls `torch.distributed.init_process_group`, as the rank that call
names (its rank= and world_size=, else its RANK and WORLD_SIZE): a process that never calls it
(a DataLoader or pool worker) leaves no file. The started rank 0 moves the launching process's
own file aside (rank-0.jsonl is its), and the launching process removes it at its end.

Without this, such a program's ranks ran uncaptured and the folder held one file of the
launching process, with no collective: a clean verdict on a program nothing had seen.
"""

import inspect
import os
import sys
from urllib.parse import parse_qs, urlparse

_SPAWN_MODULE = "torch.multiprocessing.spawn"


class _Started:
    """What a started process needs of the capture that started it, to capture itself (plain
    data, pickled to the process)."""

    def __init__(self, cap):
        self.out_dir = cap.out_dir
        self.device = cap.device
        self.argv = cap.argv
        self.timeout = cap.timeout
        self.values = cap.values

    def capture(self, rank, world):
        """This process's capture as `rank` of `world` (to enter)."""
        from . import Capture, forget_inherited
        from . import hooks
        forget_inherited()  # start method "fork": the launching process's capture
        hooks._Quiet.forked = False  # a started rank is no worker
        return Capture(self.out_dir, device=self.device, argv=self.argv, timeout=self.timeout,
                       values=self.values, rank=(rank, world))


class SpawnedRank(_Started):
    """The function each started process runs, fn(i, *args), under a capture of its own."""

    def __init__(self, fn, cap, nprocs):
        super().__init__(cap)
        self.fn = fn
        self.nprocs = nprocs

    def __call__(self, i, *args):
        # The one-GPU backend takes over where more ranks share a machine than it has GPUs.
        os.environ.setdefault("LOCAL_WORLD_SIZE", str(self.nprocs))
        with self.capture(i, self.nprocs):
            return self.fn(i, *args)


class StartedProcess(_Started):
    """A multiprocessing.Process's target, started while a capture of no launched rank ran
    (pickled to the process with the target). The process becomes a captured rank when it calls
    init_process_group; until then, and if it never does, it records nothing."""

    def __init__(self, target, cap):
        super().__init__(cap)
        self.target = target
        st = os.stat(cap.path)
        self.launcher = (cap.path, st.st_dev, st.st_ino, os.getpid())

    def __call__(self, *args, **kwargs):
        at_init = _CaptureAtInit(self)
        at_init.install()
        try:
            result = self.target(*args, **kwargs)
        except BaseException as e:
            at_init.end(type(e), e, e.__traceback__)
            raise
        at_init.end(None, None, None)
        return result

    def move_launcher_aside(self):
        """Rank 0 of the started processes writes rank-0.jsonl, the launching process's file
        until now: that one moves to aside_path(), if it is still there."""
        path, dev, ino, pid = self.launcher
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == (dev, ino):
                os.rename(path, aside_path(self.out_dir, pid))
        except OSError:
            pass


def aside_path(out_dir, pid):
    """Where a launching process's file goes once a process it started is rank 0."""
    return os.path.join(out_dir, ".launcher-%d.jsonl" % pid)


class _CaptureAtInit:
    """In a started process: the capture begins inside its first init_process_group, before
    the process group is made (the one-GPU backend must take "nccl" over), as the rank the call
    names."""

    def __init__(self, started):
        self.started = started
        self.cap = None
        self._undo = []

    def install(self):
        import torch.distributed as dist
        c10d = dist.distributed_c10d
        orig = c10d.init_process_group
        wrapped = self._wrap(orig)
        for owner in (dist, c10d):
            if getattr(owner, "init_process_group", None) is orig:
                self._undo.append((owner, orig))
                owner.init_process_group = wrapped

    def uninstall(self):
        for owner, orig in reversed(self._undo):
            owner.init_process_group = orig
        self._undo = []

    def _wrap(self, orig):
        at_init = self

        def init_process_group(*args, **kwargs):
            at_init.uninstall()
            import torch.distributed as dist
            rank, world = named_rank(orig, args, kwargs)
            if rank is None:  # a store or URL that names no rank: it is known once made
                out = dist.init_process_group(*args, **kwargs)
                at_init.begin(dist.get_rank(), dist.get_world_size())
                return out
            # The processes are this machine's ranks (the one-GPU backend counts them).
            os.environ.setdefault("LOCAL_WORLD_SIZE", str(world))
            at_init.begin(rank, world)
            return dist.init_process_group(*args, **kwargs)  # the one-GPU backend's, if on
        return init_process_group

    def begin(self, rank, world):
        if rank == 0:
            self.started.move_launcher_aside()
        self.cap = self.started.capture(rank, world)
        self.cap.__enter__()

    def end(self, exc_type, exc, tb):
        self.uninstall()
        if self.cap is not None:
            self.cap.__exit__(exc_type, exc, tb)


def named_rank(init, args, kwargs):
    """(rank, world size) an init_process_group call names: its arguments, its init_method's
    query (tcp://host:port?rank=R&world_size=N), else RANK and WORLD_SIZE; (None, None) when
    none says."""
    try:
        bound = inspect.signature(init).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {}
    rank, world = bound.get("rank", -1), bound.get("world_size", -1)
    method = bound.get("init_method")
    if isinstance(method, str) and "?" in method:
        query = parse_qs(urlparse(method).query)
        rank = int(query["rank"][0]) if rank == -1 and "rank" in query else rank
        world = int(query["world_size"][0]) if world == -1 and "world_size" in query else world
    if rank == -1 and "RANK" in os.environ:
        rank = int(os.environ["RANK"])
    if world == -1 and "WORLD_SIZE" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
    if rank is None or world is None or rank < 0 or world < 1:
        return None, None
    return int(rank), int(world)


class Starter:
    """Patches start_processes (which spawn calls) and, in a capture of no launched rank,
    multiprocessing's Process.start, while the capture `cap` runs."""

    def __init__(self, cap):
        self.cap = cap
        self.started = 0  # processes started under the capture
        self._undo = []

    def install(self):
        self._install_process()
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
                self._undo.append((owner, "start_processes", orig))
                owner.start_processes = wrapped

    def uninstall(self):
        for owner, name, orig in reversed(self._undo):
            setattr(owner, name, orig)
        self._undo = []

    def _install_process(self):
        if not self.cap.unlaunched:
            return  # a launched rank's processes are its workers, not ranks
        from multiprocessing.process import BaseProcess
        orig = BaseProcess.start
        cap = self.cap

        def start(proc):
            target = getattr(proc, "_target", None)
            if (target is not None and not cap.handed_over and os.getpid() == cap.pid and
                    not isinstance(target, StartedProcess) and
                    getattr(target, "__module__", None) != _SPAWN_MODULE):
                proc._target = StartedProcess(target, cap)
            return orig(proc)
        self._undo.append((BaseProcess, "start", orig))
        BaseProcess.start = start

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
            return orig(SpawnedRank(fn, cap, nprocs), args, nprocs, join, daemon, start_method)
        return start_processes
