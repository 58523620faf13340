"""Capture a PyTorch program's stream work, memory and collectives, one file per rank.

    with shardcheck.capture("DIR"):      # or: python3 -m shardcheck.capture --out DIR -- x.py
        ...

The rank and world size come from the launcher's environment (torchrun's RANK/WORLD_SIZE,
Open MPI's OMPI_COMM_WORLD_RANK/SIZE, Slurm's SLURM_PROCID/NTASKS), or from an initialized
torch.distributed. Files follow docs/capture-format.md.
"""

import os
import signal
import sys
import threading
import time

from .writer import rank_file

_ENV = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def rank_and_world():
    return named_rank() or (0, 1)


def named_rank():
    """(rank, world size) from a launcher's environment or an initialized torch.distributed;
    None when neither says (a program started as `python3 x.py`)."""
    for r, w in _ENV:
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    return None


# How long a rank may sit inside one collective before the capture calls it hung: NCCL's own
# default timeout. SHARDCHECK_CAPTURE_TIMEOUT (seconds) or the launcher's --timeout set it.
DEFAULT_TIMEOUT = 600.0


def _timeout():
    try:
        return float(os.environ.get("SHARDCHECK_CAPTURE_TIMEOUT", DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


class Capture:
    """Records into out_dir/rank-<R>.jsonl. However the rank ends, its file is whole: finished,
    or marked partial with why and where (an exception and its line, a signal, a collective
    that hung past the timeout)."""

    def __init__(self, out_dir, device=None, argv=None, timeout=None, values=None, rank=None):
        """values: write digests of collective inputs and of parameters and gradients at
        each optimizer step (values.py); on by default, SHARDCHECK_CAPTURE_VALUES=0 turns it off.
        rank: (rank, world size) where the environment does not say (spawned.py)."""
        from . import values as _values
        self.values = _values.enabled() if values is None else values
        self._values = None
        self.out_dir = out_dir
        self.device = device
        self.argv = argv
        self.timeout = _timeout() if timeout is None else timeout
        self.recorder = None
        self._hooks = None
        self.path = None
        self._done = threading.Event()
        self._closed = threading.Lock()
        self._threads = []
        self._onegpu = None
        self.rank = rank
        self.handed_over = False  # the program started its own ranks (spawned.py)
        self._starter = None
        self.pid = None  # the process that entered it
        self.unlaunched = False  # no launcher and no process group named this rank
        # Called with the status once os._exit has ended the file (the command line's report
        # and check); returns the status to exit with.
        self.at_exit = None

    def __enter__(self):
        import torch

        from .hooks import Hooks, StorageRefs
        from .recorder import Recorder

        if os.environ.get("TORCH_CUDA_SANITIZER") is not None:
            raise RuntimeError("shardcheck.capture: TORCH_CUDA_SANITIZER is set (to any value, it "
                               "turns torch's own sanitizer on): unset it to capture")
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.pid = os.getpid()
        named = self.rank or named_rank()
        self.unlaunched = named is None
        rank, world = named or (0, 1)
        os.makedirs(self.out_dir, exist_ok=True)
        self.path = rank_file(self.out_dir, rank)
        header = {"rank": rank, "world_size": world, "torch": torch.__version__,
                  "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                  "argv": list(self.argv) if self.argv is not None else []}
        from .folder import LAUNCH_ENV
        if os.environ.get(LAUNCH_ENV):  # the capture that launched this rank (folder.py)
            header["launch"] = os.environ[LAUNCH_ENV]
        if _one_gpu_wanted(torch):
            # More ranks here than GPUs: "nccl" is the one-GPU backend (onegpu.py).
            from . import onegpu
            onegpu.install()
            self._onegpu = onegpu
            header["process_group"] = "shardcheck one-GPU backend, NCCL's stream semantics"
        backend = None
        if device == "cuda":
            # Which allocator handed out the blocks whose addresses the alloc records carry:
            # the checker models its reuse (caching, or cudaMallocAsync's stream order).
            backend = getattr(torch.cuda, "get_allocator_backend", lambda: "native")()
            header["allocator"] = backend
            header["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        # CUDA's caching allocator reports every free; CPU tensors, and CUDA ones under
        # cudaMallocAsync, have no such callbacks: a storage made at a live one's address is a
        # new one there.
        sees_frees = device == "cuda" and backend == "native"
        self.recorder = Recorder(self.path, header, sees_frees=sees_frees,
                                 addresses=device == "cuda",
                                 storages=None if sees_frees else StorageRefs())
        self._hooks = Hooks(self.recorder, device)
        from .values import ParameterNames
        self.recorder.param_name = ParameterNames(device)
        self._hooks.install()
        if self.values:
            from .values import Values
            self._values = self._hooks.values = Values(self.recorder, self._hooks)
            self._values.install()
        self._start_guards()
        self._os_exit, os._exit = os._exit, self._exit_now
        from .spawned import Starter
        self._starter = Starter(self)
        self._starter.install()
        _live.append(self)
        return self

    def _uninstall(self):
        """Takes out what the capture installed, but for the starter (spawned.py), which lives
        until __exit__."""
        if self._values is not None:
            self._values.uninstall()
        self._hooks.uninstall()
        if os._exit == self._exit_now:
            os._exit = self._os_exit
        if self in _live:
            _live.remove(self)

    def hand_over(self):
        """The program starts its own ranks (spawned.py): this process is only their launcher.
        Its capture ends here and leaves no file: each rank writes its own, rank 0 where this
        process's was."""
        self._stop_guards()
        self._uninstall()
        if self._closed.acquire(blocking=False):
            self.recorder.abandon()
            try:
                os.remove(self.path)
            except OSError:
                pass
        self.handed_over = True

    def _exit_now(self, status):
        """os._exit, which skips every `finally` and atexit handler (scripts call it to skip a
        process group's teardown): the file ends first, finished when the status is 0."""
        from . import hooks
        if os.getpid() != self.pid:  # a forked child's copy of its parent's capture
            self._os_exit(status)
        if not (self._closed.locked() or self.handed_over or hooks._Quiet.forked):
            try:
                if threading.current_thread() is threading.main_thread():
                    exc = None if status == 0 else SystemExit(status)
                    self.__exit__(type(exc) if exc else None, exc, None)
                else:  # the main thread may be anywhere: only the end record
                    self._close(None if status == 0 else "exited with status %d" % status,
                                None)
            except Exception:  # noqa: BLE001 (the exit goes ahead whatever happened)
                pass
        at_exit, self.at_exit = self.at_exit, None
        if at_exit is not None and not hooks._Quiet.forked:
            try:
                status = at_exit(status)
            except Exception:  # noqa: BLE001 (the exit goes ahead whatever happened)
                pass
        self._os_exit(status)

    def __exit__(self, exc_type, exc, tb):
        self._starter.uninstall()
        if self.handed_over:
            return False
        if exc_type is not None and issubclass(exc_type, SystemExit) and exc.code in (None, 0):
            exc_type = exc = tb = None  # sys.exit(main()) after a run that went well: finished
        if exc_type is None and self._hooks.cuda:
            import torch

            from .hooks import quiet
            with quiet():  # inside the guards: a collective that never ends is hung
                torch.cuda.synchronize()
        self._stop_guards()
        if self._values is not None and exc_type is None:
            self._values.flush()
        self._uninstall()
        if exc_type is None:
            self._close(None, None)
        elif issubclass(exc_type, SystemExit):
            code = exc.code
            why = "exited with status %d" % code if isinstance(code, int) else "exited: %s" % code
            self._close(why, _raise_site(tb) if tb is not None else _main_site())
        else:
            why = "raised %s" % exc_type.__name__
            if str(exc):
                why += ": %s" % exc
            self._close(why, _raise_site(tb))
        self._displaced()
        return False

    def _displaced(self):
        """A process this one started became rank 0 (spawned.py) and moved this file aside:
        this process was only the launcher of the program's ranks, and leaves no file."""
        from .spawned import aside_path
        aside = aside_path(self.out_dir, self.pid)
        if os.path.exists(aside):
            os.remove(aside)
            self.handed_over = True

    # -- ending whole, however the rank ends ----------------------------------------------
    def _close(self, partial, where):
        """Writes the end record once, whichever thread gets here first."""
        if not self._closed.acquire(blocking=False):
            return False
        self.recorder.close(partial, where)
        return True

    def _start_guards(self):
        # SIGINT and SIGTERM reach a thread of ours through the signal module's wakeup fd
        # (whichever thread the kernel delivers them to), which ends the file even while the
        # main thread sits inside a collective, where a Python handler would never run.
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            r, w = os.pipe()
            os.set_blocking(w, False)
            self._pipe = (r, w)
            self._previous = ({sig: signal.signal(sig, _ignore) for sig in _STOP_SIGNALS},
                              signal.set_wakeup_fd(w))
            self._spawn(self._on_signal)
        if self.timeout > 0:
            self._spawn(self._watch)

    def _spawn(self, fn):
        t = threading.Thread(target=fn, name="shardcheck-capture", daemon=True)
        t.start()
        self._threads.append(t)

    def _stop_guards(self):
        self._done.set()
        for t in self._threads:
            t.join()
        self._threads = []
        if self._previous is not None:
            handlers, fd = self._previous
            signal.set_wakeup_fd(fd)
            for sig, h in handlers.items():
                signal.signal(sig, h if h is not None else signal.SIG_DFL)
            for end in self._pipe:
                os.close(end)
            self._previous = None

    def _on_signal(self):
        import select
        while not self._done.is_set():
            ready, _, _ = select.select([self._pipe[0]], [], [], 0.1)
            if not ready:
                continue
            got = os.read(self._pipe[0], 1)
            if not got or got[0] not in _STOP_SIGNALS:
                continue
            signo = got[0]
            if signal.getsignal(signo) is not _ignore:
                # The program's own handler (a checkpoint saved on preemption) runs on its main
                # thread and ends the program as it chooses; the file ends with it.
                continue
            flight = self._hooks.in_flight
            why = "stopped by %s" % signal.Signals(signo).name
            if flight is not None:
                why += " inside %s" % flight[0]
            self._hooks.flush_in_flight()  # the collective it sits in, as far as it got
            if self._close(why, flight[2] if flight else _main_site()):
                print("shardcheck.capture: rank file %s ended: %s" % (self.path, why),
                      file=sys.stderr, flush=True)
            os._exit(128 + signo)

    def _watch(self):
        backend = self._onegpu
        while not self._done.wait(0.5):
            # A collective the main thread sits in, or one the one-GPU backend issued that its
            # stream has not passed (the host goes on, as on NCCL): the older counts.
            flights = [self._hooks.in_flight, backend.oldest_pending() if backend else None]
            flights = [f for f in flights if f]
            flight = min(flights, key=lambda f: f[1]) if flights else None
            if flight is None or time.monotonic() - flight[1] < self.timeout:
                continue
            why = ("hung: %.0f s inside %s, which the other ranks never completed "
                   "(SHARDCHECK_CAPTURE_TIMEOUT, --timeout)" % (self.timeout, flight[0]))
            self._hooks.flush_in_flight()  # the collective it sits in, as far as it got
            if self._close(why, flight[2]):
                print("shardcheck.capture: rank file %s ended: %s at %s:%d"
                      % (self.path, why, flight[2][0], flight[2][1]), file=sys.stderr, flush=True)
            os._exit(EXIT_HUNG)


_live = []  # the captures running in this process, innermost last


def forget_inherited():
    """In a process forked from a capturing one that becomes a rank of its own (spawned.py):
    the capture it inherited takes its hooks out (its file is the parent's, and its writer
    already points nowhere), so the rank's own capture is the only one."""
    for cap in reversed(list(_live)):
        if cap.pid != os.getpid():
            cap._starter.uninstall()
            cap._uninstall()


def _one_gpu_wanted(torch):
    """Whether this rank gets the one-GPU backend: torch 2.x, and more ranks on this machine
    (torchrun's LOCAL_WORLD_SIZE) than GPUs. SHARDCHECK_ONE_GPU=0 turns it off, =1 on (with
    CUDA) whatever the count."""
    wanted = os.environ.get("SHARDCHECK_ONE_GPU")
    if wanted == "0" or int(torch.__version__.split(".")[0]) < 2:
        return False
    if wanted == "1":
        return torch.cuda.is_available()
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    except ValueError:
        return False
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return local > max(gpus, 1)


# A rank the capture ended because it hung (as GNU timeout exits).
EXIT_HUNG = 124
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(signo, frame):
    """The Python-level handler: the wakeup fd has told our thread, which does the work."""


def _raise_site(tb):
    """(file, line, func) of the user's line the exception came through, innermost."""
    from .hooks import where
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return where(last.tb_frame) if last is not None else None


def _main_site():
    from .hooks import where
    frame = sys._current_frames().get(threading.main_thread().ident)
    return where(frame) if frame is not None else None


def capture(out_dir, device=None, values=None):
    """Context manager: records what runs inside it into out_dir/rank-<R>.jsonl; values=False
    leaves out the value digests (on by default; SHARDCHECK_CAPTURE_VALUES=0 turns them off)."""
    return Capture(out_dir, device=device, values=values)


__all__ = ["capture", "Capture", "named_rank", "rank_and_world"]


class _CallableModule(type(sys)):
    """`shardcheck.capture("DIR")` is capture("DIR"); the name still denotes this module, so
    `import shardcheck.capture` and `shardcheck.capture.Capture` work too."""

    def __call__(self, out_dir, device=None, values=None):
        return capture(out_dir, device=device, values=values)


sys.modules[__name__].__class__ = _CallableModule
