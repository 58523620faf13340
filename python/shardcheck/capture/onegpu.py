"""A c10d backend that lets several processes share one GPU with ProcessGroupNCCL's stream
semantics, so a program written for N GPUs on NCCL runs, and is captured, on one.

NCCL refuses two ranks of one communicator on one GPU. This backend keeps what a program sees
of ProcessGroupNCCL in torch 2.11 (ProcessGroupNCCL.cpp: collective(), pointToPoint(),
WorkNCCL::wait) and moves the data on the GPU itself:

- ``async_op=False`` (the default of ``dist.all_reduce`` and the rest): the collective runs on
  the caller's current stream, as 2.11 runs it, and the call returns at once.
- ``async_op=True`` (and every call from C++: DDP's reducer, ``_broadcast_coalesced``): one
  internal stream per group records nothing of its own until the collective: an event recorded
  on the caller's stream, which the internal stream waits for; the collective; an end event.
  ``work.wait()`` makes the current stream wait for the end event and does not block the host.
  The Work holds the inputs and outputs until it is waited for (2.11 stashes them instead of
  calling record_stream); a collective nobody waits for lets go of them once it has finished,
  as NCCL's watchdog does.
- Point to point outside a batch runs on a stream of its own per pair of ranks (NCCL's pair
  communicators); a batch (``batch_isend_irecv``, ``_coalescing_manager``) runs on the group's
  stream and ends with one event. Its transfers progress together (their chunks interleave,
  as one NCCL group's do): the capture records each of a batch_isend_irecv's on a stream of its
  own, forked from the group's and joined back (p2p.batch). ``work.is_completed()`` answering
  True to the program is a sync with its end event.
- ``barrier`` blocks the host until the barrier and the caller's stream are done.

How the data moves: the lowest rank of a group allocates device memory (cuMemAlloc) with a slot
per rank and two counters per rank, and the others map it (CUDA IPC). A collective is a series
of rounds, each enqueued on the stream the collective runs on when it is issued: wait until
every rank has read the previous round's slots; copy this rank's contribution into its slot;
write "arrived" (cuStreamWriteValue32); wait for every rank's "arrived" (cuStreamWaitValue32);
compute this rank's outputs from the slots (copies, and the reduction in rank order); write
"consumed". Point to point uses a two-slot region per pair the same way. No host thread takes
part: the collective is as asynchronous to the compute stream as NCCL's kernels are, and a
program that touches a tensor before waiting races on the hardware as it would on NCCL.

CPU tensors go to gloo, blocking, as a "cpu:gloo,cuda:nccl" group would send them.
The capture records each collective on the stream it runs on, before issuing it, never the
backend's own copies.
"""

import ctypes
import inspect
import os
import sys
import threading
import time
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

from . import collectives
from . import hooks as _hooks
from . import p2p as _p2p
from .collectives import Call

NAME = "shardcheck"


class BackendError(RuntimeError):
    pass


def _mib(var, default):
    try:
        return max(1, int(os.environ.get(var, default))) << 20
    except ValueError:
        return default << 20


# A group's slot per rank, and a pair's slot per direction; larger tensors go in several rounds.
SLOT_BYTES = _mib("SHARDCHECK_ONE_GPU_SLOT_MB", 64)
PIPE_BYTES = _mib("SHARDCHECK_ONE_GPU_PIPE_MB", 16)
# SHARDCHECK_ONE_GPU_DEBUG=1: each collective's group, stream and rounds, and each shared
# region made or opened, on standard error.
_DEBUG = os.environ.get("SHARDCHECK_ONE_GPU_DEBUG", "") not in ("", "0")
_ALIGN = 256


# -- the CUDA driver ---------------------------------------------------------------------------
class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _Driver:
    """The few driver entry points the backend needs, from libcuda (no build step)."""

    _WAIT_GEQ = 0x0

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise BackendError("shardcheck one-GPU backend: libcuda.so.1 not found (%s)" % e)
        u64, size, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p

        def fn(name, *argtypes):
            f = getattr(lib, name, None)
            if f is None:
                raise BackendError("shardcheck one-GPU backend: the CUDA driver has no %s" % name)
            f.argtypes, f.restype = list(argtypes), ctypes.c_int
            return f

        self._alloc = fn("cuMemAlloc_v2", ctypes.POINTER(u64), size)
        self._memset = fn("cuMemsetD8_v2", u64, ctypes.c_ubyte, size)
        self._ipc_get = fn("cuIpcGetMemHandle", ctypes.POINTER(_IpcHandle), u64)
        self._ipc_open = fn("cuIpcOpenMemHandle_v2", ctypes.POINTER(u64), _IpcHandle, ctypes.c_uint)
        self._wait = fn("cuStreamWaitValue32_v2", vp, u64, ctypes.c_uint32, ctypes.c_uint)
        self._write = fn("cuStreamWriteValue32_v2", vp, u64, ctypes.c_uint32, ctypes.c_uint)
        self._ctx_get = fn("cuCtxGetCurrent", ctypes.POINTER(vp))
        self._ctx_set = fn("cuCtxSetCurrent", vp)
        self._retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
        self._tls = threading.local()

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise BackendError("shardcheck one-GPU backend: %s failed with CUDA driver error %d"
                               % (what, rc))

    def _current(self):
        """Makes the device's primary context (the one torch uses) current on this thread."""
        ctx = ctypes.c_void_p()
        self._check(self._ctx_get(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            self._check(self._retain(ctypes.byref(ctx), torch.cuda.current_device()),
                        "cuDevicePrimaryCtxRetain")
            self._check(self._ctx_set(ctx), "cuCtxSetCurrent")

    def _on_thread(self):
        if not getattr(self._tls, "current", False):
            self._current()
            self._tls.current = True

    def alloc_shared(self, nbytes):
        """(pointer, IPC handle bytes) of nbytes of zeroed device memory."""
        self._current()
        ptr = ctypes.c_uint64()
        self._check(self._alloc(ctypes.byref(ptr), nbytes), "cuMemAlloc of %d bytes" % nbytes)
        self._check(self._memset(ptr.value, 0, nbytes), "cuMemsetD8")
        handle = _IpcHandle()
        self._check(self._ipc_get(ctypes.byref(handle), ptr.value), "cuIpcGetMemHandle")
        # Every byte of the handle (reading the c_char field would stop at its first zero).
        return ptr.value, ctypes.string_at(ctypes.addressof(handle), ctypes.sizeof(handle))

    def open_shared(self, raw):
        self._current()
        handle = _IpcHandle()
        ctypes.memmove(ctypes.addressof(handle), raw, 64)
        ptr = ctypes.c_uint64()
        self._check(self._ipc_open(ctypes.byref(ptr), handle, 1), "cuIpcOpenMemHandle")
        return ptr.value

    def wait(self, stream, addr, value):
        """stream waits until the counter at addr reaches value (cyclic comparison)."""
        self._on_thread()
        self._check(self._wait(stream.cuda_stream, addr, value & 0xFFFFFFFF, self._WAIT_GEQ),
                    "cuStreamWaitValue32")

    def write(self, stream, addr, value):
        """Once stream's earlier work is done (and visible), the counter at addr is value."""
        self._on_thread()
        self._check(self._write(stream.cuda_stream, addr, value & 0xFFFFFFFF, 0),
                    "cuStreamWriteValue32")


_driver_once = None


def _driver():
    global _driver_once
    if _driver_once is None:
        _driver_once = _Driver()
    return _driver_once


class _Cai:
    """A CUDA array interface over raw device memory, for a tensor that aliases it."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2}


def _bytes_at(ptr, nbytes):
    return torch.as_tensor(_Cai(ptr, nbytes), device="cuda")


def _round_up(n, to=_ALIGN):
    return (n + to - 1) // to * to


class _Region:
    """Device memory the members of a group (or a pair) share: `nslots` slots of `slot` bytes,
    then `ncounters` 32-bit counters. Its owner allocates it and hands its IPC handle to the
    others through the group's store; the others wait for it there."""

    def __init__(self, store, key, owner, nslots, slot, ncounters):
        drv = _driver()
        nbytes = nslots * slot + _round_up(4 * ncounters)
        if owner:
            self.base, raw = drv.alloc_shared(nbytes)
            store.set(key, raw)
        else:
            self.base = drv.open_shared(store.get(key))
        if _DEBUG:
            print("onegpu: rank %s %s region %s at %#x (%d bytes)" % (
                os.environ.get("RANK", "?"), "made" if owner else "opened", key, self.base, nbytes),
                file=sys.stderr, flush=True)
        self.slots = [_bytes_at(self.base + i * slot, slot) for i in range(nslots)]
        self._counters = self.base + nslots * slot

    def counter(self, i):
        return self._counters + 4 * i


class _Rounds:
    """A group's slots and the round protocol over them (module text)."""

    def __init__(self, store, me, n):
        self.me, self.n = me, n
        self.slot = SLOT_BYTES
        self.region = _Region(store, "shardcheck/slots", me == 0, n, self.slot, 2 * n)
        self.k = 0

    def round(self, stream, publish=None, consume=None):
        drv, r, n = _driver(), self.region, self.n
        self.k += 1
        k = self.k
        # Every rank, this one too (its last round may run on another stream), has read round
        # k-1's slots: this rank's slot is free.
        for p in range(n):
            drv.wait(stream, r.counter(n + p), k - 1)
        if publish is not None:
            publish(r.slots[self.me])
        drv.write(stream, r.counter(self.me), k)
        for p in range(n):
            if p != self.me:
                drv.wait(stream, r.counter(p), k)  # p's contribution is in its slot
        if consume is not None:
            consume(r.slots)
        drv.write(stream, r.counter(n + self.me), k)


class _Pipe:
    """Point to point between two ranks of a group: a slot per direction, and for each a count
    of messages sent and taken. The lower rank allocates it."""

    def __init__(self, store, me, peer):
        lo, hi = min(me, peer), max(me, peer)
        self.slot = PIPE_BYTES
        self.region = _Region(store, "shardcheck/pipe/%d/%d" % (lo, hi), me == lo, 2, self.slot, 4)
        self.out_dir = 0 if me == lo else 1
        self.sent = self.taken = 0

    def send(self, stream, publish):
        drv, r, d = _driver(), self.region, self.out_dir
        self.sent += 1
        drv.wait(stream, r.counter(2 * d + 1), self.sent - 1)  # the peer took the last one
        publish(r.slots[d])
        drv.write(stream, r.counter(2 * d), self.sent)

    def recv(self, stream, consume):
        drv, r, d = _driver(), self.region, 1 - self.out_dir
        self.taken += 1
        drv.wait(stream, r.counter(2 * d), self.taken)
        consume(r.slots[d])
        drv.write(stream, r.counter(2 * d + 1), self.taken)


# -- reductions ----------------------------------------------------------------------------------
def _reduce_key(op):
    """'SUM', 'AVG', 'PREMUL_SUM', ... of a ReduceOp (or its RedOpType)."""
    return str(getattr(op, "op", op)).rsplit(".", 1)[-1].upper()


# The factors of the PREMUL_SUM ops _make_nccl_premul_sum made, by the id of the op object it
# returned (the ReduceOp a backend receives is a copy that keeps its factor from Python); the
# last ones only, each with its op so that the id stays its own.
_premul_factors = {}
_PREMUL_KEPT = 4096


def _remember_premul(op, factor):
    _premul_factors[id(op)] = (op, factor)
    while len(_premul_factors) > _PREMUL_KEPT:
        del _premul_factors[next(iter(_premul_factors))]


def _premul_factor(op):
    """The factor of a PREMUL_SUM: from the op's pickled state where torch gives one, else from
    the op object the torch.distributed call was given."""
    try:
        state = op.__getstate__()
        if isinstance(state, tuple) and len(state) == 2 and state[1] is not None:
            return state[1]
    except Exception:
        pass
    for candidate in (op, _hooks.current_reduce_op()):
        found = _premul_factors.get(id(candidate))
        if found is not None and found[0] is candidate:
            return found[1]
    raise BackendError("shardcheck one-GPU backend: a PREMUL_SUM whose factor is unknown (made "
                       "before the capture began, or passed to the process group directly)")


def _reducer(op, size):
    """acc <- the reduction of parts, in rank order, in place; acc may alias parts[0]'s target."""
    key = _reduce_key(op)
    factor = _premul_factor(op) if key == "PREMUL_SUM" else None
    if key not in ("SUM", "AVG", "PREMUL_SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        raise BackendError("shardcheck one-GPU backend: reduce op %s" % key)

    def run(acc, parts):
        if acc.dtype == torch.bool:
            either = key in ("SUM", "AVG", "PREMUL_SUM", "MAX", "BOR", "BXOR")
            acc.copy_(parts[0])
            for p in parts[1:]:
                (torch.logical_or if either else torch.logical_and)(acc, p, out=acc)
            return
        if key == "PREMUL_SUM":
            acc.copy_(parts[0]).mul_(factor)
            for p in parts[1:]:
                acc.add_(p * factor)
            return
        acc.copy_(parts[0])
        for p in parts[1:]:
            if key in ("SUM", "AVG"):
                acc.add_(p)
            elif key == "PRODUCT":
                acc.mul_(p)
            elif key == "MIN":
                torch.minimum(acc, p, out=acc)
            elif key == "MAX":
                torch.maximum(acc, p, out=acc)
            elif key == "BAND":
                acc.bitwise_and_(p)
            elif key == "BOR":
                acc.bitwise_or_(p)
            else:
                acc.bitwise_xor_(p)
        if key == "AVG":
            if acc.is_floating_point() or acc.is_complex():
                acc.div_(size)
            else:
                acc.floor_divide_(size)
    return run


def _flat(t):
    """t as one dimension of real numbers, aliasing t (NCCL's requirement: contiguous)."""
    if not t.is_contiguous():
        raise ValueError("Tensors must be contiguous")
    t = t.view(-1)
    return torch.view_as_real(t).view(-1) if t.is_complex() else t


def _typed(slot, offset, n, like):
    isz = like.element_size()
    return slot[offset * isz:(offset + n) * isz].view(like.dtype)


# -- one collective: what the capture records, and the rounds it enqueues -----------------------
class _Part:
    """One collective of a job: `record()` writes its capture records; `steps` enqueue it,
    each a function of the stream (p2p steps carry the chunk index they belong to)."""

    __slots__ = ("record", "steps", "tensors", "what", "host")

    def __init__(self, what, record, steps, tensors, host=None):
        self.what, self.record, self.steps, self.tensors = what, record, steps, tensors
        self.host = host  # the same collective on CPU tensors, through gloo


def _chunks(n, per):
    """(start, length) rounds over n elements, per at most: at least one round."""
    if n == 0:
        return [(0, 0)]
    return [(c, min(per, n - c)) for c in range(0, n, per)]


class _Inflight:
    __slots__ = ("what", "since", "site", "event", "stash")

    def __init__(self, what, site):
        self.what, self.since, self.site = what, time.monotonic(), site
        self.event, self.stash = None, None


_groups = weakref.WeakSet()


def oldest_pending():
    """(what, since, (file, line, func)) of the oldest collective of any group whose stream has
    not passed it (or whose issue has not returned), or None."""
    best = None
    for g in list(_groups):
        for f in list(g._inflight):
            if f.event is not None and f.event.query():
                continue
            if best is None or f.since < best.since:
                best = f
            break
    return None if best is None else (best.what, best.since, best.site)


class _Work(dist._Work if hasattr(dist, "_Work") else dist.Work):
    def __init__(self, end, future, inflight, host_blocking=False, outputs=()):
        super().__init__()
        self._end, self._future, self._inflight = end, future, inflight
        self._host_blocking, self._outputs = host_blocking, list(outputs)

    def wait(self, timeout=timedelta(0)):
        if self._end is not None:
            cur = torch.cuda.current_stream()
            cur.wait_event(self._end)
            if self._host_blocking:
                cur.synchronize()  # barrier: the host waits for it, as NCCL's does
        if self._inflight is not None:
            self._inflight.stash = None  # WorkNCCL::wait unstashes
        return True

    def block_current_stream(self):
        if self._end is not None:
            torch.cuda.current_stream().wait_event(self._end)

    def synchronize(self):
        self.block_current_stream()

    def is_completed(self):
        if self._end is None:
            return True
        done = self._end.query()
        if done:
            _hooks.backend_done(self._end)  # the program saw it finished, as a sync shows it
        return done

    def is_success(self):
        return True

    def exception(self):
        return None

    def get_future(self):
        return self._future

    def result(self):
        return self._outputs


def _done_future(value):
    f = torch.futures.Future()
    f.set_result(value)
    return f


class _Backend:
    """What c10d's Python code asks of pg._get_backend(device)."""

    supports_splitting = False
    supports_coalescing = True
    supports_time_estimate = False

    def supports_tensor_alloc(self, device):
        return False

    def name(self):
        return "nccl"


class OneGpuGroup(dist.ProcessGroup):
    """The process group c10d gets for "nccl" under the capture: see the module's text."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._store, self._rank, self._size, self._timeout = store, rank, size, timeout
        self._name = ""
        self._desc = ""
        self._rounds = None
        self._pipes = {}
        self._streams = {}
        self._gloo = None
        self._coalescing = None
        self._inflight = []
        _groups.add(self)

    # -- identity, as c10d and DeviceMesh ask for it -------------------------------------------
    def getBackendName(self):
        return "nccl"

    def getRank(self):
        return self._rank

    def getSize(self):
        return self._size

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def setGroupName(self, name):
        self._name = name

    def getGroupName(self):
        return self._name

    def _set_group_name(self, name):
        self._name = name

    @property
    def group_name(self):
        return self._name

    def setGroupDesc(self, desc):
        self._desc = desc

    def getGroupDesc(self):
        return self._desc

    def _set_group_desc(self, desc):
        self._desc = desc

    @property
    def group_desc(self):
        return self._desc

    @property
    def _device_types(self):
        return [torch.device("cuda")]

    def _get_backend(self, device):
        return _Backend()

    def _get_backend_name(self):
        return "nccl"

    @property
    def supports_coalescing(self):
        return True

    def shutdown(self):
        for s in self._streams.values():
            s.synchronize()

    def abort(self):
        pass

    # -- streams and memory ---------------------------------------------------------------------
    def _label(self):
        if dist.distributed_c10d._world.default_pg is self:
            return "world"
        return "group " + (self._name or "?")

    def _global(self, group_rank):
        try:
            return dist.get_global_rank(self, group_rank)
        except Exception:
            return group_rank

    def _stream(self, key):
        """The group's internal stream (key None) or a pair's (key: the peer's group rank)."""
        s = self._streams.get(key)
        if s is None:
            with _hooks.quiet():
                s = self._streams[key] = torch.cuda.Stream()
            label = "nccl " + self._label()
            if key is not None:
                a, b = sorted((self._global(self._rank), self._global(key)))
                label += " p2p %d:%d" % (a, b)
            _hooks.backend_stream(s, label)
        return s

    def _group_rounds(self):
        if self._rounds is None:
            self._rounds = _Rounds(self._store, self._rank, self._size)
        return self._rounds

    def _pipes_to(self, peers):
        """The pipes to peers, made in an order that cannot deadlock: first the ones this rank
        allocates (to higher ranks), then the ones it opens (waiting for their owners)."""
        for p in sorted(set(peers), key=lambda q: (q < self._rank, q)):
            if p != self._rank and p not in self._pipes:
                self._pipes[p] = _Pipe(self._store, self._rank, p)
        return self._pipes

    # -- issuing ----------------------------------------------------------------------------------
    def _issue(self, parts, async_op=True, stream_key=None, host_blocking=False):
        """Runs parts (a job: a collective, or a coalesced group) and returns its Work."""
        if self._coalescing is not None:
            self._coalescing.extend(parts)
            return _Work(None, _done_future([]), None)
        tensors = [t for p in parts for t in p.tensors]
        if tensors and not any(t.is_cuda for t in tensors):
            return self._issue_host(parts)
        return self._launch(parts, tensors, async_op, stream_key, host_blocking)

    def _launch(self, parts, tensors, async_op, stream_key, host_blocking):
        self._reap()
        caller = torch.cuda.current_stream()
        site = _hooks.user_where()
        flight = _Inflight(" + ".join(p.what for p in parts) or "collective", site)
        self._inflight.append(flight)
        if async_op:
            s = self._stream(stream_key)
            start = torch.cuda.Event()
            start.record(caller)
            s.wait_event(start)
        else:
            s = caller
        written = []  # (collective index, output) of what the capture wrote
        for p in parts:
            written += p.record(s) or []  # before it is issued: a rank that hangs in it has it
        k0 = self._rounds.k if self._rounds is not None else 0
        with _hooks.quiet(), torch.cuda.stream(s):
            _enqueue(parts, s)
        _hooks.backend_outputs(written, s)  # issued: the digests of its outputs, behind it
        if _DEBUG:
            k1 = self._rounds.k if self._rounds is not None else 0
            print("onegpu: rank %d %s: %s on stream %#x, rounds %d..%d, %s" % (
                dist.get_rank(), self._label(), flight.what, s.cuda_stream, k0, k1,
                "async" if async_op else "on the caller's stream"), file=sys.stderr, flush=True)
        outputs = [t for t in tensors if t.is_cuda]
        if not async_op:
            with _hooks.quiet():
                flight.event = torch.cuda.Event()
                flight.event.record(s)
            return _Work(None, _done_future(outputs), None, outputs=outputs)
        end = torch.cuda.Event()
        end.record(s)
        future = torch.futures.Future(devices=[caller.device])
        with torch.cuda.stream(s):
            future.set_result(outputs)
        flight.event, flight.stash = end, tensors
        return _Work(end, future, flight, host_blocking, outputs)

    def _reap(self):
        """Lets go of the tensors of finished collectives nobody waited for (NCCL's watchdog
        does so once they finish): their frees follow the collectives' streams."""
        keep = []
        done = []
        for f in self._inflight:
            (done if f.event is not None and f.event.query() else keep).append(f)
        self._inflight = keep
        if any(f.stash for f in done):
            with _hooks.background_frees():
                for f in done:
                    f.stash = None

    def _issue_host(self, parts):
        """CPU tensors: gloo, blocking, as gloo's own CPU collectives are."""
        if self._gloo is None:
            self._gloo = dist.ProcessGroupGloo(
                dist.PrefixStore("shardcheck-gloo/", self._store), self._rank, self._size,
                self._timeout)
        outs = []
        for p in parts:
            outs += p.host(self._gloo)
        return _Work(None, _done_future(outs), None, outputs=outs)

    # -- parts -------------------------------------------------------------------------------------
    def _part(self, what, c10d_name, calls, steps, tensors, reduce="none", root=0, peer=None,
              tag=0, host=None, op_reads=None, op_writes=None):
        def record(stream):
            if calls is None:
                _hooks.backend_op(c10d_name, op_reads or [], op_writes or [], stream)
                return []
            return _hooks.backend_collective(c10d_name, calls, self, reduce, root, peer, tag, stream)
        return _Part(what, record, steps, list(tensors), host)

    def _reduce_name(self, op):
        return _hooks.reduce_name(op)

    def _rounds_allreduce(self, t, op, root=None):
        """Steps of an all_reduce of t in place (root: a reduce to that group rank)."""
        red = _reducer(op, self._size)
        flat = _flat(t)
        per = max(1, SLOT_BYTES // flat.element_size())

        def step(c0, m):
            def run(stream):
                def publish(slot):
                    _typed(slot, 0, m, flat).copy_(flat[c0:c0 + m])

                def consume(slots):
                    if root is None or root == self._rank:
                        red(flat[c0:c0 + m], [_typed(s, 0, m, flat) for s in slots])
                self._group_rounds().round(stream, publish, consume)
            return run
        return [step(c0, m) for c0, m in _chunks(flat.numel(), per)]

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        steps = [s for t in tensors for s in self._rounds_allreduce(t, op)]
        part = self._part("allreduce", "c10d::allreduce_",
                          [Call("all_reduce", t, t, t.numel()) for t in tensors], steps, tensors,
                          reduce=self._reduce_name(op), host=self._host_allreduce(tensors, op))
        return self._issue([part], _async(opts))

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        parts = []
        for t in tensors:
            parts.append(self._part("allreduce", "c10d::allreduce_coalesced_",
                                    [Call("all_reduce", t, t, t.numel())],
                                    self._rounds_allreduce(t, op), [t],
                                    reduce=self._reduce_name(op),
                                    host=self._host_allreduce([t], op)))
        return self._issue(parts, _async(opts))

    def reduce(self, tensors, opts=None):
        root, op = opts.rootRank, opts.reduceOp
        steps = [s for t in tensors for s in self._rounds_allreduce(t, op, root=root)]

        def host(g):
            copies = [t.clone() for t in tensors]
            _host_allreduce(g, copies, op, self._size)
            if self._rank == root:
                for t, c in zip(tensors, copies):
                    t.copy_(c)
            return list(tensors)
        part = self._part("reduce", "c10d::reduce_",
                          [Call("reduce", t, t, t.numel()) for t in tensors],
                          steps, tensors, reduce=self._reduce_name(op), root=root, host=host)
        return self._issue([part], _async(opts))

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        steps = []
        for t in tensors:
            flat = _flat(t)
            per = max(1, SLOT_BYTES // flat.element_size())
            for c0, m in _chunks(flat.numel(), per):
                steps.append(self._broadcast_step(flat, c0, m, root))

        def host(g):
            o = dist.BroadcastOptions()
            o.rootRank = root
            g.broadcast(tensors, o).wait()
            return list(tensors)
        part = self._part("broadcast", "c10d::broadcast_",
                          [Call("broadcast", t, t, t.numel()) for t in tensors], steps, tensors,
                          root=root, host=host)
        return self._issue([part], _async(opts))

    def _broadcast_step(self, flat, c0, m, root):
        def run(stream):
            def publish(slot):
                _typed(slot, 0, m, flat).copy_(flat[c0:c0 + m])

            def consume(slots):
                flat[c0:c0 + m].copy_(_typed(slots[root], 0, m, flat))
            mine = self._rank == root
            self._group_rounds().round(stream, publish if mine else None,
                                       None if mine else consume)
        return run

    def _gather_steps(self, inp, outs):
        """all_gather: outs[p] (flat views) gets member p's inp."""
        flat = _flat(inp)
        per = max(1, SLOT_BYTES // max(1, flat.element_size()))
        steps = []
        for c0, m in _chunks(flat.numel(), per):
            def run(stream, c0=c0, m=m):
                def publish(slot):
                    _typed(slot, 0, m, flat).copy_(flat[c0:c0 + m])

                def consume(slots):
                    for p, o in enumerate(outs):
                        o[c0:c0 + m].copy_(_typed(slots[p], 0, m, flat))
                self._group_rounds().round(stream, publish, consume)
            steps.append(run)
        return steps

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != input.numel() * self._size:
            raise ValueError("output tensor size must be equal to world_size times input tensor "
                             "size")
        outs = list(_flat(output).chunk(self._size)) if input.numel() else []
        steps = self._gather_steps(input, outs) if input.numel() else \
            [lambda s: self._group_rounds().round(s)]

        def host(g):
            g.allgather([list(output.view(-1).chunk(self._size))], [input.reshape(-1)]).wait()
            return [output]
        part = self._part("all_gather", "c10d::_allgather_base_",
                          [Call("all_gather", input, output, input.numel())], steps,
                          [input, output],
                          host=host)
        return self._issue([part], _async(opts))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        parts = []
        for o, i in zip(outputs, inputs):
            part = self._part("all_gather", "c10d::allgather_into_tensor_coalesced_",
                              [Call("all_gather", i, o, i.numel())],
                              self._gather_steps(i, list(_flat(o).chunk(self._size))), [i, o])
            part.host = self._host_gather_base(o, i)
            parts.append(part)
        return self._issue(parts, _async(opts))

    def _host_gather_base(self, o, i):
        def host(g):
            g.allgather([list(o.view(-1).chunk(self._size))], [i.reshape(-1)]).wait()
            return [o]
        return host

    def allgather(self, output_lists, input_tensors, opts=None):
        parts = []
        for outs, inp in zip(output_lists, input_tensors):
            for o in outs:
                if o.numel() != inp.numel():
                    raise ValueError("all_gather: every output tensor must have the input's size")
            part = self._part("all_gather", "c10d::allgather_",
                              collectives.all_gather_list(inp, list(outs)),
                              self._gather_steps(inp, [_flat(o) for o in outs]),
                              [inp] + list(outs), op_reads=[inp], op_writes=list(outs))

            def host(g, outs=outs, inp=inp):
                g.allgather([list(outs)], [inp]).wait()
                return list(outs)
            part.host = host
            parts.append(part)
        return self._issue(parts, _async(opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def _scatter_reduce_steps(self, segments, out, op):
        """reduce_scatter: out gets the reduction over members of their segments[me]."""
        red = _reducer(op, self._size)
        fout = _flat(out)
        segs = [_flat(s) for s in segments]
        per = max(1, (SLOT_BYTES // self._size) // fout.element_size())
        steps = []
        for c0, m in _chunks(fout.numel(), per):
            def run(stream, c0=c0, m=m):
                def publish(slot):
                    for q, seg in enumerate(segs):
                        _typed(slot, q * per, m, fout).copy_(seg[c0:c0 + m])

                def consume(slots):
                    red(fout[c0:c0 + m], [_typed(s, self._rank * per, m, fout) for s in slots])
                self._group_rounds().round(stream, publish, consume)
            steps.append(run)
        return steps

    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if input.numel() != output.numel() * self._size:
            raise ValueError("input tensor must be the same size as output size times world size")
        segments = list(_flat(input).chunk(self._size)) if output.numel() else \
            [output.view(-1)] * self._size
        part = self._part("reduce_scatter", "c10d::_reduce_scatter_base_",
                          [Call("reduce_scatter", input, output, output.numel())],
                          self._scatter_reduce_steps(segments, output, op), [input, output],
                          reduce=self._reduce_name(op), host=self._host_rs(output, input, op))
        return self._issue([part], _async(opts))

    def _host_rs(self, out, inp, op):
        def host(g):
            full = inp.clone().view(-1)
            _host_allreduce(g, [full], op, self._size)
            out.copy_(full.chunk(self._size)[self._rank].view(out.shape))
            return [out]
        return host

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        parts = []
        for o, i in zip(outputs, inputs):
            parts.append(self._part("reduce_scatter", "c10d::reduce_scatter_tensor_coalesced_",
                                    [Call("reduce_scatter", i, o, o.numel())],
                                    self._scatter_reduce_steps(list(_flat(i).chunk(self._size)),
                                                               o, op),
                                    [i, o], reduce=self._reduce_name(op),
                                    host=self._host_rs(o, i, op)))
        return self._issue(parts, _async(opts))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        parts = []
        for o, ins in zip(outputs, input_lists):
            part = self._part("reduce_scatter", "c10d::reduce_scatter_",
                              collectives.reduce_scatter_list(list(ins), o),
                              self._scatter_reduce_steps(list(ins), o, op), [o] + list(ins),
                              reduce=self._reduce_name(op), op_reads=list(ins), op_writes=[o])

            def host(g, o=o, ins=ins):
                full = torch.cat([x.reshape(-1) for x in ins])
                _host_allreduce(g, [full], op, self._size)
                o.copy_(full.split([x.numel() for x in ins])[self._rank].view(o.shape))
                return [o]
            part.host = host
            parts.append(part)
        return self._issue(parts, _async(opts))

    def barrier(self, opts=None):
        part = self._part("barrier", "c10d::barrier", [Call("barrier", None, None, 0)],
                          [lambda s: self._group_rounds().round(s)], [])
        part.host = lambda g: (g.barrier().wait(), [])[1]
        if not torch.cuda.is_available():
            return self._issue_host([part])
        return self._issue([part], True, host_blocking=True)

    # -- point to point and its batches -----------------------------------------------------------
    def _p2p_steps(self, kind, t, peer):
        """Chunked sends or receives of t to or from group rank peer, each step tagged with its
        chunk index so that a batch interleaves them (module text)."""
        flat = _flat(t)
        per = max(1, PIPE_BYTES // max(1, flat.element_size()))
        steps = []
        for i, (c0, m) in enumerate(_chunks(flat.numel(), per)):
            if kind == "send":
                def run(stream, c0=c0, m=m):
                    self._pipes_to([peer])[peer].send(
                        stream, lambda slot: _typed(slot, 0, m, flat).copy_(flat[c0:c0 + m]))
            else:
                def run(stream, c0=c0, m=m):
                    self._pipes_to([peer])[peer].recv(
                        stream, lambda slot: flat[c0:c0 + m].copy_(_typed(slot, 0, m, flat)))
            run.chunk = i
            steps.append(run)
        return steps

    def send(self, tensors, dst, tag=0):
        parts = [self._part("send", "c10d::send", [Call("send", t, t, t.numel())],
                            self._p2p_steps("send", t, dst), [t], peer=dst, tag=tag,
                            host=self._host_p2p("send", t, dst, tag)) for t in tensors]
        return self._issue(parts, True, stream_key=dst)

    def recv(self, tensors, src, tag=0):
        parts = [self._part("recv", "c10d::recv_", [Call("recv", t, t, t.numel())],
                            self._p2p_steps("recv", t, src), [t], peer=src, tag=tag,
                            host=self._host_p2p("recv", t, src, tag)) for t in tensors]
        return self._issue(parts, True, stream_key=src)

    def _host_p2p(self, kind, t, peer, tag):
        def host(g):
            (g.send if kind == "send" else g.recv)([t], peer, tag).wait()
            return [t]
        return host

    def recv_anysource(self, tensors, tag=0):
        raise BackendError("recv from any source is not supported by NCCL")

    def _exchange_parts(self, what, name, sends, recvs, tensors, calls=None, op_reads=(),
                        op_writes=()):
        """A collective made of point to point (all_to_all, gather, scatter), as NCCL makes it:
        sends[q] and recvs[p] are flat tensors (None where nothing moves); to and from this rank
        itself a copy."""
        steps = []
        for q, t in enumerate(sends):
            if t is None:
                continue
            if q == self._rank:
                src, dst = t, recvs[q]
                steps.append(_local_copy(src, dst))
            else:
                steps += self._p2p_steps("send", t, q)
        for p, t in enumerate(recvs):
            if t is not None and p != self._rank:
                steps += self._p2p_steps("recv", t, p)
        return self._part(what, name, calls, steps, tensors, op_reads=list(op_reads),
                          op_writes=list(op_writes))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        n = self._size

        def split(t, sizes):
            flat = _flat(t)
            if not sizes:
                return list(flat.chunk(n)) if flat.numel() else [flat] * n
            row = flat.numel() // max(1, t.shape[0]) if t.dim() else 1
            return list(flat.split([s * row for s in sizes]))
        part = self._exchange_parts("all_to_all", "c10d::alltoall_base_",
                                    split(input, list(input_split_sizes or [])),
                                    split(output, list(output_split_sizes or [])), [input, output],
                                    calls=collectives.all_to_all_single(
                                        output, input, output_split_sizes, input_split_sizes,
                                        self._rank, n),
                                    op_reads=[input], op_writes=[output])

        def host(g):
            g.alltoall_base(output, input, list(output_split_sizes or []),
                            list(input_split_sizes or []), dist.AllToAllOptions()).wait()
            return [output]
        part.host = host
        return self._issue([part], _async(opts))

    def alltoall(self, outputs, inputs, opts=None):
        part = self._exchange_parts("all_to_all", "c10d::alltoall_", [_flat(t) for t in inputs],
                                    [_flat(t) for t in outputs], list(inputs) + list(outputs),
                                    calls=collectives.all_to_all(outputs, inputs, self._rank,
                                                                 self._size),
                                    op_reads=inputs, op_writes=outputs)

        def host(g):
            g.alltoall(list(outputs), list(inputs), dist.AllToAllOptions()).wait()
            return list(outputs)
        part.host = host
        return self._issue([part], _async(opts))

    def gather(self, outputs, inputs, opts=None):
        root = opts.rootRank
        outs = [t for lst in outputs for t in lst]
        inp = inputs[0]
        n = self._size
        if self._rank == root:
            sends = [None] * n
            sends[root] = _flat(inp)
            recvs = [_flat(t) for t in outs]
        else:
            sends = [None] * n
            sends[root] = _flat(inp)
            recvs = [None] * n
        part = self._exchange_parts("gather", "c10d::gather_", sends, recvs, [inp] + outs,
                                    calls=collectives.gather(inp, outs, root, self._rank, n),
                                    op_reads=[inp], op_writes=outs)

        def host(g):
            o = dist.GatherOptions()
            o.rootRank = root
            g.gather([outs] if self._rank == root else [], [inp], o).wait()
            return outs
        part.host = host
        return self._issue([part], _async(opts))

    def scatter(self, outputs, inputs, opts=None):
        root = opts.rootRank
        ins = [t for lst in inputs for t in lst]
        out = outputs[0]
        n = self._size
        sends = [_flat(t) for t in ins] if self._rank == root else [None] * n
        recvs = [None] * n
        recvs[root] = _flat(out)
        part = self._exchange_parts("scatter", "c10d::scatter_", sends, recvs, ins + [out],
                                    calls=collectives.scatter(out, ins, root, self._rank, n),
                                    op_reads=ins, op_writes=[out])

        def host(g):
            o = dist.ScatterOptions()
            o.rootRank = root
            g.scatter([out], [ins] if self._rank == root else [], o).wait()
            return [out]
        part.host = host
        return self._issue([part], _async(opts))

    # -- coalescing: one job on the group's stream, one end event ---------------------------------
    def _start_coalescing(self, device):
        self._coalescing = []

    def _end_coalescing(self, device):
        parts, self._coalescing = self._coalescing or [], None
        if not parts:
            return _Work(None, _done_future([]), None)
        return self._issue(parts, True)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    # -- host collectives -------------------------------------------------------------------------
    def _host_allreduce(self, tensors, op):
        def host(g):
            _host_allreduce(g, list(tensors), op, self._size)
            return list(tensors)
        return host


def _local_copy(src, dst):
    def run(stream):
        dst.copy_(src)
    run.chunk = 0
    return run


def _enqueue(parts, stream):
    """Every part's steps on stream: collective rounds in order; the chunks of a batch's point to
    point interleaved by chunk index, so that ranks exchanging large messages both ways go on."""
    steps = [s for p in parts for s in p.steps]
    if not any(hasattr(s, "chunk") for s in steps):
        for s in steps:
            s(stream)
        return
    depth = max(getattr(s, "chunk", 0) for s in steps) + 1
    for c in range(depth):
        for s in steps:
            if getattr(s, "chunk", 0) == c:
                s(stream)


def _async(opts):
    return bool(getattr(opts, "asyncOp", True)) if opts is not None else True


def _host_allreduce(g, tensors, op, size):
    key = _reduce_key(op)
    if key == "PREMUL_SUM":
        f = _premul_factor(op)
        for t in tensors:
            t.mul_(f)
        key = "SUM"
    gop = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT,
           "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX, "BAND": dist.ReduceOp.BAND,
           "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}.get(key)
    if gop is None:
        raise BackendError("shardcheck one-GPU backend: reduce op %s" % key)
    o = dist.AllreduceOptions()
    o.reduceOp = gop
    g.allreduce(tensors, o).wait()
    if key == "AVG":
        for t in tensors:
            if t.is_floating_point():
                t.div_(size)
            else:
                t.floor_divide_(size)


# -- DTensor's functional collectives -------------------------------------------------------------
_functional_works = {}


def _group_by_name(name):
    try:
        pg = dist.distributed_c10d._resolve_process_group(name)
    except Exception:
        return None
    return pg if isinstance(pg, OneGpuGroup) else None


def _run_functional(name, func, args, kwargs):
    """The _c10d_functional operators on one of our groups: c10d's C++ would ask the group for a
    C++ backend it does not have. Runs them with async_op=True and keeps the Work for
    wait_tensor, as Functional.cpp does."""
    values = {}
    for i, a in enumerate(func._schema.arguments):
        values[a.name] = args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
    base = name.split("::", 1)[1]
    if base == "wait_tensor":
        t = values.get("tensor")
        work = _functional_works.pop(_storage_key(t), None) if t is not None else None
        if work is None:
            return NotImplemented
        work.wait()
        return t
    group = _group_by_name(values.get("group_name"))
    if group is None:
        return NotImplemented
    reduce_ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
                  "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

    def opts_with(op):
        o = dist.AllreduceOptions()
        o.reduceOp = reduce_ops[str(op).lower()]
        return o
    if base in ("all_reduce", "all_reduce_"):
        inp = values["input"]
        out = inp if base.endswith("_") else _copied(inp)
        work = group.allreduce([out], opts_with(values["reduce_op"]))
    elif base == "all_gather_into_tensor":
        inp = values["input"]
        out = inp.new_empty((inp.shape[0] * group.size(),) + tuple(inp.shape[1:]))
        work = group._allgather_base(out, inp.contiguous())
    elif base == "reduce_scatter_tensor":
        inp = values["input"]
        out = inp.new_empty((inp.shape[0] // group.size(),) + tuple(inp.shape[1:]))
        o = dist.ReduceScatterOptions()
        o.reduceOp = reduce_ops[str(values["reduce_op"]).lower()]
        work = group._reduce_scatter_base(out, inp.contiguous(), o)
    elif base in ("broadcast", "broadcast_"):
        inp = values["input"]
        out = inp if base.endswith("_") else _copied(inp)
        o = dist.BroadcastOptions()
        o.rootRank = values["src"]
        work = group.broadcast([out], o)
    elif base == "all_to_all_single":
        inp = values["input"]
        outs = list(values["output_split_sizes"] or [])
        rows = sum(outs) if outs else inp.shape[0]
        out = inp.new_empty((rows,) + tuple(inp.shape[1:]))
        work = group.alltoall_base(out, inp.contiguous(), outs,
                                   list(values["input_split_sizes"] or []))
    else:
        return NotImplemented
    _functional_works[_storage_key(out)] = work
    return out


def _copied(t):
    """A copy of t to reduce in place, as Functional.cpp makes it, recorded: the dispatch mode
    does not see what runs inside its own handler."""
    out = t.clone()
    _hooks.backend_op("aten::clone", [t], [out], torch.cuda.current_stream())
    return out


def _storage_key(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return id(t)


# -- routing "nccl" here ----------------------------------------------------------------------------
def _create(store, rank, size, timeout):
    return OneGpuGroup(store, rank, size, timeout)


_installed = False
_patched = []


def _nccl_to_ours(backend):
    if backend is None:
        return NAME  # the default, cuda:nccl and cpu:gloo: this group sends CPU tensors to gloo
    text = str(backend)
    if text.lower() == "nccl":
        return NAME
    if "nccl" in text.lower():
        return ",".join(p.replace("nccl", NAME) for p in text.split(","))
    return backend


def _patch(obj, name, make):
    orig = getattr(obj, name)
    setattr(obj, name, make(orig))
    _patched.append((obj, name, orig))


def _wrap_init_pg(orig):
    def init_process_group(backend=None, *args, **kwargs):
        ours = _nccl_to_ours(backend)
        if ours != backend and kwargs.get("device_id") is not None:
            # NCCL's eager start-up on that device; this backend starts lazily: bind the
            # device as the caller asked and go on.
            torch.cuda.set_device(kwargs.pop("device_id"))
        return orig(ours, *args, **kwargs)
    return init_process_group


def _wrap_new_group(orig):
    def new_group_(*args, **kwargs):
        if "backend" in kwargs:
            if kwargs["backend"] is not None:
                kwargs["backend"] = _nccl_to_ours(kwargs["backend"])
        elif len(args) >= 3:
            args = list(args)
            if args[2] is not None:
                args[2] = _nccl_to_ours(args[2])
        return orig(*args, **kwargs)
    return new_group_


def _wrap_get_backend(orig):
    def get_backend_(group=None):
        found = orig(group)
        return "nccl" if str(found) == NAME else found
    return get_backend_


def _wrap_batch_isend_irecv(orig):
    def batch_isend_irecv_(p2p_op_list):
        group = p2p_op_list[0].group if p2p_op_list else None
        group = group or dist.distributed_c10d._get_default_group()
        if not isinstance(group, OneGpuGroup):
            return orig(p2p_op_list)
        # NCCL's batch: one coalesced job on the group's stream (c10d takes this path only
        # for a group whose type is ProcessGroup itself).
        device = p2p_op_list[0].tensor.device
        with _p2p.batch(), dist.distributed_c10d._coalescing_manager(group, device, async_ops=True) as cm:
            for p in p2p_op_list:
                send = p.op is dist.isend
                if hasattr(p, "group_peer"):
                    peer = {("group_dst" if send else "group_src"): p.group_peer}
                else:
                    peer = {("dst" if send else "src"): p.peer}
                p.op(p.tensor, group=p.group, tag=p.tag, **peer)
        return cm.works
    return batch_isend_irecv_


def _wrap_premul(orig):
    def make_nccl_premul_sum(factor):
        op = orig(factor)
        _remember_premul(op, factor)
        return op
    return make_nccl_premul_sum


def _wrap_hint_op(orig):
    sig = inspect.signature(orig)

    def with_op(*args, **kwargs):
        op = sig.bind_partial(*args, **kwargs).arguments.get("op")
        if op is None:
            return orig(*args, **kwargs)
        with _hooks.reduce_op(op):  # where _premul_factor finds the caller's op
            return orig(*args, **kwargs)
    return with_op


def _remap_devices():
    """Device indices past this machine's GPUs go onto them (cuda:k is cuda:(k mod count)): the
    dispatch hook's devices, torch.cuda's current device, and the device a tensor is made on."""
    count = torch.cuda.device_count()
    _hooks.remap_devices(lambda d: _onto(d, count))

    def exchange(orig):
        def exchange_(device):
            return orig(device % count if isinstance(device, int) and device >= 0 else device)
        return exchange_
    for name in ("_exchange_device", "_maybe_exchange_device"):
        if hasattr(torch.cuda, name):
            _patch(torch.cuda, name, exchange)

    def set_device(orig):
        def set_device_(device):
            return orig(_onto(device, count))
        return set_device_
    _patch(torch.cuda, "set_device", set_device)

    # torch.tensor(data, device="cuda:3") copies to its device in C++, under a device
    # guard, before any operator the dispatch hook could remap: its device is remapped here.
    def device_kwarg(orig):
        def remapped(*args, **kwargs):
            if kwargs.get("device") is not None:
                kwargs["device"] = _onto(kwargs["device"], count)
            return orig(*args, **kwargs)
        return remapped
    for name in ("tensor", "as_tensor", "asarray"):
        if hasattr(torch, name):
            _patch(torch, name, device_kwarg)
    _patch(torch.Tensor, "new_tensor", device_kwarg)


def install():
    """Registers the backend and routes "nccl" (and the default backend) to it, and device
    indices past the GPUs onto them. Idempotent."""
    global _installed
    if _installed:
        return
    if NAME not in getattr(dist.Backend, "backend_list", []) and \
            not hasattr(dist.Backend, NAME.upper()):
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    for fname in ("all_reduce", "reduce", "reduce_scatter_tensor", "reduce_scatter",
                  "all_reduce_coalesced"):
        if hasattr(dist, fname) and "op" in inspect.signature(getattr(dist, fname)).parameters:
            _patch(dist, fname, _wrap_hint_op)
    for obj in {dist, dist.distributed_c10d}:
        if hasattr(obj, "_make_nccl_premul_sum"):
            _patch(obj, "_make_nccl_premul_sum", _wrap_premul)
        _patch(obj, "init_process_group", _wrap_init_pg)
        _patch(obj, "new_group", _wrap_new_group)
        _patch(obj, "get_backend", _wrap_get_backend)
        _patch(obj, "batch_isend_irecv", _wrap_batch_isend_irecv)
    _hooks.route_functional(_run_functional)
    if torch.cuda.is_available():
        _remap_devices()
    _installed = True


def _onto(device, count):
    """cuda:k for k past this machine's GPUs is cuda:(k mod count)."""
    if isinstance(device, int):
        return device % count
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda" and device.index is not None:
        return torch.device("cuda", device.index % count)
    return device


def uninstall():
    global _installed
    _hooks.remap_devices(None)
    _hooks.route_functional(None)
    for obj, name, orig in reversed(_patched):
        setattr(obj, name, orig)
    _patched.clear()
    _installed = False
