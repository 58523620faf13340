"""Feeds a Recorder from a running torch program.

- Operators: a TorchDispatchMode sees every aten operator after autograd (backward included),
  with its schema: an argument whose alias information says "written" is a write, any other
  tensor argument a read, and a returned tensor that aliases no argument is a fresh write.
  A view (returns alias an argument, nothing written) touches no bytes. Ranges are byte ranges
  of the storage, covering every element a strided view can reach.
- Allocator, events and synchronization: torch's GPU trace callbacks, the ones its own CUDA
  sanitizer uses (activated the same way).
- Collectives: the c10d operators the process group dispatches (``c10d::allreduce_`` …). The
  process group's own event record/wait around the collective (its internal stream waits for
  the caller's; an end event after it) arrive as trace callbacks during the call; the
  collective record is placed between them, on the internal stream. Torch before 2.0 does not
  dispatch c10d operators: there the torch.distributed functions are wrapped instead.
"""

import os
import sys
import sysconfig
import threading
import time
from typing import NamedTuple, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import collectives, handovers, p2p
from .collectives import Call

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
_SKIP = (_TORCH_DIR + os.sep, _OWN_DIR + os.sep, _STDLIB + os.sep)
# Inside torch's tree but a program, not the library: torch's own distributed tests
# (distributed_test.py and its siblings), whose lines findings name.
_PROGRAMS_IN_TORCH = (os.path.join(_TORCH_DIR, "testing", "_internal", "distributed") + os.sep,)


def hidden(filename):
    """True for a frame that is not the program's: torch's (but for its own distributed test
    programs), the standard library's, the capture's, and frozen modules'."""
    if filename.startswith(_SKIP):
        return not filename.startswith(_PROGRAMS_IN_TORCH)
    return filename.startswith("<frozen")

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.bool: "bool",
}
_REDUCE = {"SUM": "sum", "AVG": "avg", "PRODUCT": "product", "MIN": "min", "MAX": "max"}

# Views that only make a new tensor header: no bytes are touched.
_NO_ACCESS = {"aten::empty", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
              "aten::empty_like", "aten::set_", "aten::resize_", "aten::record_stream",
              "aten::_has_compatible_shallow_copy_type", "aten::is_pinned", "aten::lift_fresh",
              "_c10d_functional::_wrap_tensor_autograd"}
# In-place operators that overwrite `self` without reading it; every other in-place write to
# `self` reads it too (x.add_(1) reads x), which the definedness check needs.
_OVERWRITE = {"aten::copy_", "aten::fill_", "aten::zero_", "aten::normal_", "aten::uniform_",
              "aten::random_", "aten::bernoulli_", "aten::exponential_", "aten::geometric_",
              "aten::cauchy_", "aten::log_normal_", "aten::index_put_", "aten::index_fill_",
              "aten::masked_fill_", "aten::_index_put_impl_", "aten::set_"}
_ALLOCATING_EMPTY = {"aten::empty", "aten::empty_strided", "aten::new_empty",
                     "aten::new_empty_strided", "aten::empty_like"}


# The c10d operators of the list forms (collectives.py).
_LIST_FORMS = {"allgather_", "reduce_scatter_", "gather_", "scatter_", "alltoall_"}
# What a call is made of besides collectives: transfer halves, and the copy of a rank's own part.
_NOT_COLLECTIVES = ("send", "recv", "copy")


class _Described(NamedTuple):
    """What one c10d call is (Hooks._describe): calls None when it is not understood."""

    calls: Optional[list]
    pg: object
    reduce: str
    root: int
    peer: Optional[int]
    tag: object


def _pairs(values, in1, in2, out1, out2):
    """(input, output) pairs of a tensor form, one tensor or the coalesced lists."""
    outs = values.get(out1, values.get(out2))
    ins = values.get(in1, values.get(in2))
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    ins = ins if isinstance(ins, (list, tuple)) else [ins]
    return list(zip(ins, outs))


class _PendingCollective:
    """A c10d call being made (Hooks._c10d): what it is, known before the backend has it, and the
    process group's own records made during it (``during``, the calling thread's deferred
    callbacks). Written once (Hooks._write_c10d): on CPU before the call; on CUDA when it returns
    or raises, between the process group's events; or, when the rank hangs inside it, by the
    capture's watchdog before it ends the file."""

    def __init__(self, hooks, name, func, args, kwargs, described, caller, site, taken, during):
        self.hooks, self.name, self.func, self.args, self.kwargs = hooks, name, func, args, kwargs
        self.described, self.caller, self.site, self.taken = described, caller, site, taken
        self.during = during
        self._lock = threading.Lock()
        self._written = False

    def write(self, ran):
        """ran: the call returned (its outputs are then written behind it)."""
        with self._lock:
            if self._written:
                return
            self._written = True
        self.hooks._write_c10d(self, ran)


def _all_gather_copy_in(args, kwargs, out):
    """FSDP2's fsdp::all_gather_copy_in(inputs, all_gather_output, ...) -> (input, output): its
    schema marks no argument as written, yet it copies the inputs into this rank's slice of
    all_gather_output and returns that slice and the output itself (views, not new tensors)."""
    inputs = args[0] if args else kwargs.get("all_gather_inputs", [])
    return list(inputs), [out[0]]


# Operators whose schema does not say what they touch: name -> (args, kwargs, result) ->
# (tensors read, tensors written); their results are never fresh tensors.
_ACCESS_BY_NAME = {"fsdp::all_gather_copy_in": _all_gather_copy_in}

# Operators that multiply their one tensor operand by a number: the number is written as the op
# record's `scale` (docs/capture-format.md), so that the checker knows what a gradient was divided
# by (value checks, docs/findings.md).
_SCALING = {"aten::mul": False, "aten::mul_": False, "aten::div": True, "aten::div_": True,
            "aten::_foreach_mul_": False, "aten::_foreach_div_": True, "aten::_foreach_mul": False,
            "aten::_foreach_div": True}


def _number(x):
    """A Python number, or a one-element tensor on the CPU (a number torch wrapped), as a float;
    None for anything else."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, torch.Tensor) and x.dim() == 0 and x.device.type == "cpu" and \
            not x.is_complex():
        with quiet():
            return float(x.item())
    return None


def _scale_of(name, args, kwargs):
    """The factor an operator of _SCALING multiplies its tensor operand by, or None (a tensor
    operand, a rounding mode, a list of different numbers)."""
    if len(args) < 2 or kwargs.get("rounding_mode") is not None:
        return None
    first, other = args[0], args[1]
    if isinstance(first, (list, tuple)):
        if isinstance(other, (list, tuple)):
            numbers = {_number(x) for x in other}
            other = numbers.pop() if len(numbers) == 1 else None
        if other is None:
            return None
    elif not isinstance(first, torch.Tensor) or (isinstance(other, torch.Tensor) and first.dim() == 0):
        return None
    x = _number(other)
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    if _SCALING[name]:
        return 1.0 / x if x != 0 else None
    return x

_main_thread = threading.main_thread()
_main_ident = _main_thread.ident
# A thread the program started, or a pool task it submitted, running no frame of the program's
# (Thread(target=torch.full, ...)): its records name the line that started or submitted it.
_origin = threading.local()
# cuda:k past this machine's GPUs onto one of them (the one-GPU backend sets it).
_remap = None


def remap_devices(fn):
    """Operators asked for device d run on fn(d) instead; None stops it."""
    global _remap
    _remap = fn


def reduce_name(red):
    """'sum', 'avg', ... for a ReduceOp in any of the forms torch passes it around."""
    import torch.distributed as dist
    candidates = [red]
    unbox = getattr(dist.ReduceOp, "unbox", None)
    if unbox is not None:
        try:
            candidates.append(unbox(red))
        except Exception:
            pass
    for c in list(candidates):
        op = getattr(c, "op", None)
        if op is not None:
            candidates.append(op)
    for c in candidates:
        for key, value in _REDUCE.items():
            member = getattr(dist.ReduceOp, key, None)
            try:
                if member is not None and (c == member or c == getattr(member, "op", member)):
                    return value
            except Exception:
                pass
        text = str(getattr(c, "name", c)).upper()
        for key, value in _REDUCE.items():
            if text.endswith(key) or ("." + key) in text:
                return value
    return "sum"
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# Subclasses whose operators come back as plain tensors' (and, for a functional collective's
# result, its wait_tensor first): followed into them, not run unseen.
_LOWERING = ("DTensor", "AsyncCollectiveTensor")


def _user_frame(frame):
    while frame is not None:
        if not hidden(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def where(frame):
    """(file, line, func) of the user's frame at or above ``frame``, as sites name them."""
    frame = _user_frame(frame)
    if frame is None:
        return ("<torch>", 0, "")
    return (_relpath(frame.f_code.co_filename), frame.f_lineno, frame.f_code.co_name)


def _relpath(path):
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel


def _storage(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()


class _StorageOf:
    """A span's storage size, asked only for a lifetime the recorder has not seen (its call),
    and a weak reference to that storage (weak()), which tells when it is freed where the
    allocator reports no free (CPU, cudaMallocAsync)."""

    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    def __call__(self):
        return _storage(self.t).nbytes()

    def weak(self):
        return _storage(self.t)._weak_ref()


class StorageRefs:
    """Recorder's weak references: expired(ref) once the storage is freed; release(ref)."""

    def __init__(self):
        cls = getattr(torch, "UntypedStorage", None)
        self.expired = cls._expired
        self.release = cls._free_weak_ref


def tensor_span(t):
    """(storage ptr, storage bytes or a function giving them, byte offset, byte length) of what
    t can touch, or None."""
    if t.numel() == 0:
        return None
    try:
        isz = t.element_size()
        so = t.storage_offset()
        ptr = t.data_ptr() - so * isz
    except RuntimeError:
        return None  # no real storage (a fake or functional tensor)
    if ptr <= 0:
        return None
    lo = hi = so
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return (ptr, _StorageOf(t), lo * isz,
            (hi - lo + 1) * isz)


def dtype_and_count(t):
    """A tensor's dtype as records name it and its element count (bytes where the format has no
    name for its dtype)."""
    if t.dtype in _DTYPES:
        return _DTYPES[t.dtype], t.numel()
    return "u8", t.numel() * t.element_size()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


class _Mode(TorchDispatchMode):
    def __init__(self, hooks):
        super().__init__()
        self.hooks = hooks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Other tensor subclasses (fake, functional tensors) handle the operator themselves;
        # what they run is not seen (docs/capture.md, "What is not captured").
        if any(t not in _PLAIN for t in types):
            if all(t in _PLAIN or t.__name__ in _LOWERING for t in types):
                return NotImplemented  # they lower to plain tensors, which come back here
            return func(*args, **(kwargs or {}))
        return self.hooks.dispatch(func, args, kwargs or {})


class Hooks:
    """Installs the callbacks and the dispatch mode for one Recorder."""

    def __init__(self, recorder, device):
        self.rec = recorder
        self.device = device  # "cuda" or "cpu"
        self.cuda = device == "cuda"
        self._tls = threading.local()
        self._mode = None
        self._patched = []
        self._autograd_threads = set()  # idents of autograd's device threads seen so far
        # Threads other than the main one inside backward() or autograd.grad(), innermost
        # last: (ident, timeline); autograd's device threads work for the last.
        self._backward_by = []
        recorder.thread_of = self.timeline
        self._c10d_dispatched = int(torch.__version__.split(".")[0]) >= 2
        self._skip_file = {}
        self._site_ids = {}
        self._plans = {}
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._device_index = torch.cuda.current_device() if self.cuda else 0
        self.values = None  # values.Values, when value capture is on
        # The collective the main thread is inside, if any: (what, since, (file, line, func)),
        # for the hang watchdog (Capture); and its record, if not yet written.
        self.in_flight = None
        self._in_flight_record = None
        self._as_main = threading.local()  # a thread writing the main thread's records

    def _enter_collective(self, what, pending=None):
        """pending: the _PendingCollective the watchdog writes if the rank hangs inside it."""
        if threading.current_thread() is _main_thread:
            self.in_flight = (what, time.monotonic(), where(sys._getframe(2)))
            self._in_flight_record = pending

    def _leave_collective(self):
        if threading.current_thread() is _main_thread:
            self.in_flight = None
            self._in_flight_record = None

    def flush_in_flight(self):
        """Writes the collective the main thread sits inside, as far as it got, for the capture's
        watchdog or signal thread about to end the file (the collective has not run: no digest
        of its outputs). Written as the main thread's, whose call it is."""
        pending = self._in_flight_record
        if pending is None:
            return
        self._as_main.on = True
        try:
            pending.write(ran=False)
        finally:
            self._as_main.on = False

    # -- where ---------------------------------------------------------------------------
    def site(self):
        frame = sys._getframe(1)
        skip = self._skip_file
        while frame is not None:
            f = frame.f_code.co_filename
            not_programs = skip.get(f)
            if not_programs is None:
                not_programs = skip[f] = hidden(f)
            if not not_programs:
                break
            frame = frame.f_back
        suffix = ""
        if frame is None:
            origin = getattr(_origin, "site", None)
            if origin is not None:
                return origin  # a thread of the program's running torch alone: where it began
        if frame is None and threading.current_thread() is not _main_thread:
            # Backward runs on autograd's device threads, collectives of some backends on
            # their worker threads: name the main thread's line, which waits for them.
            node = getattr(torch._C, "_current_autograd_node", lambda: None)()
            waiting = self._in_backward(0) if node is not None else None
            frame = _user_frame(sys._current_frames().get(waiting or _main_ident))
            suffix = " (backward)" if node is not None else " (worker thread)"
        if frame is None:
            return self.rec.site("<torch>", 0, "")
        key = (frame.f_code, frame.f_lineno, suffix)
        sid = self._site_ids.get(key)
        if sid is None:
            sid = self._site_ids[key] = self.rec.site(_relpath(frame.f_code.co_filename),
                                                      frame.f_lineno,
                                                      frame.f_code.co_name + suffix)
        return sid

    def current_stream(self):
        if not self.cuda:
            return 0
        if self._raw_stream is not None:
            return self._raw_stream(self._device_index)
        return torch.cuda.current_stream().cuda_stream

    def _on_device(self, t):
        return t.device.type == self.device

    # -- callbacks: deferred while an operator runs, so its record comes first ------------
    def _deferring(self):
        return getattr(self._tls, "depth", 0) > 0

    def _emit(self, fn, *args):
        if self._deferring():
            self._tls.deferred.append((fn, args))
        else:
            fn(*args)

    def on_alloc(self, ptr):
        self.rec.on_alloc(ptr, self.current_stream(), self.site())

    def timeline(self):
        """The host thread calling, as Recorder.thread_of gives it: None for the program's
        own thread, else (key, name, start); autograd's device threads take the timeline of
        the thread waiting in backward() while they run. A thread the program started has its
        own; so has a backend's (a process group's worker or watchdog: a C++ thread outside
        autograd with no frame of the program's on it)."""
        ident = threading.get_ident()
        if ident == _main_ident or getattr(self._as_main, "on", False):
            return None
        thread = threading.current_thread()
        key = getattr(thread, "_shardcheck_key", None)
        if key is not None:
            return key, thread.name, getattr(thread, "_shardcheck_start", None)
        if not isinstance(thread, threading._DummyThread):
            return ("python", ident), thread.name, None  # started before the capture
        if ident in self._autograd_threads:
            return self._in_backward(1)
        node = getattr(torch._C, "_current_autograd_node", lambda: None)()
        if node is not None:
            self._autograd_threads.add(ident)
            return self._in_backward(1)
        if _user_frame(sys._getframe(1)) is not None:
            return None
        return ("worker", ident), "backend worker", None

    def _in_backward(self, field):
        """Of the innermost backward() on a thread other than the main one: its ident (0) or
        timeline (1); None when only the main thread is in one."""
        try:
            return self._backward_by[-1][field]
        except IndexError:
            return None

    def _worker(self):
        """True when the calling thread is a backend's own (timeline)."""
        t = self.timeline()
        return t is not None and t[0][0] == "worker"

    def on_free(self, ptr):
        # A process group's watchdog releases the tensors it held for a collective only once
        # that collective has finished.
        background = getattr(_background, "on", False) or self._worker()
        self.rec.on_free(ptr, self.site(), background)

    def on_event_create(self, ev):
        self.rec.event_created(ev)

    def on_event_delete(self, ev):
        self.rec.event_deleted(ev)

    def on_event_record(self, ev, stream):
        self._emit(self.rec.event_record, ev, stream, self.site(), self._worker())

    def on_event_wait(self, ev, stream):
        self._emit(self.rec.event_wait, ev, stream, self.site(), self._worker())

    # A sync blocks the thread that makes it: the recorder writes it on that thread's timeline.
    def on_event_sync(self, ev):
        self._emit(self.rec.event_sync, ev, self.site())

    def on_stream_sync(self, stream):
        self._emit(self.rec.stream_sync, stream, self.site())

    def on_device_sync(self):
        self._emit(self.rec.device_sync, self.site())

    # -- operators -----------------------------------------------------------------------
    def dispatch(self, func, args, kwargs):
        if getattr(_quiet, "on", False):
            return func(*args, **kwargs)  # a backend's own work (onegpu.py)
        name = func._schema.name
        if _functional is not None and name.startswith("_c10d_functional::"):
            routed = _functional(name, func, args, kwargs)
            if routed is not NotImplemented:
                return routed
        if _remap is not None and kwargs.get("device") is not None:
            kwargs = dict(kwargs, device=_remap(kwargs["device"]))
        if getattr(self._tls, "inside", False):
            return func(*args, **kwargs)
        if name.startswith("c10d::"):
            if not self._c10d_dispatched:
                self._host_filled(func, name, args, site=self.site())
            return self._c10d(func, name, args, kwargs)
        special = self._SPECIAL.get(name)
        if special is not None:
            return special(self, func, args, kwargs)
        plan = self._plans.get(func)
        if plan is None:
            plan = self._plans[func] = self._plan(func, name)
        args_plan, aliasing, no_access, returns = plan
        reads, writes, written, writes_elsewhere = self._accesses(args_plan, args, kwargs)
        if no_access or (aliasing and not written and not writes_elsewhere):
            reads, writes, written = [], [], []  # a view, or an allocator bookkeeping call
        # Storages the operator is given: a return in one of them is no new storage, even where
        # the schema does not say it aliases (aten::_unsafe_view of reshape's copy).
        given = {sp[0] for sp in (tensor_span(t) for t in _tensors(list(args) + list(kwargs.values())))
                 if sp is not None}
        self._tls.depth = getattr(self._tls, "depth", 0) + 1
        if self._tls.depth == 1:
            self._tls.deferred = []
        try:
            out = func(*args, **kwargs)
        finally:
            self._tls.depth -= 1
        if written:
            # An operator may resize what it writes (out= arguments, resize_): it wrote the
            # storage the tensor has now, as large as it is now.
            writes = [sp for sp in (tensor_span(t) for t in written) if sp is not None]
        fresh = []
        by_name = _ACCESS_BY_NAME.get(name)
        if by_name is not None:
            read_ts, write_ts = by_name(args, kwargs, out)
            reads = [sp for sp in (self._span_on_device(t) for t in read_ts) if sp is not None]
            writes = [sp for sp in (self._span_on_device(t) for t in write_ts) if sp is not None]
            returns = ()
        for fresh_return, value in zip(returns, out if isinstance(out, tuple) else (out,)):
            if not fresh_return:
                continue
            fresh += [sp for sp in (self._span_on_device(t) for t in _tensors(value))
                      if sp is not None and sp[0] not in given]
        stream = self.current_stream()
        site = self.site()
        self.rec.touch(fresh, stream, site)
        if name not in _ALLOCATING_EMPTY:
            scale = _scale_of(name, args, kwargs) if name in _SCALING else None
            self.rec.op(name, stream, reads, writes + fresh, site, scale)
        if self._tls.depth == 0:
            deferred, self._tls.deferred = self._tls.deferred, []
            for fn, a in deferred:
                fn(*a)
        return out

    def _accesses(self, args_plan, args, kwargs):
        """What an operator's arguments read and write on the captured device, by its schema:
        the spans read, the spans written, the tensors written (empty ones too: an out= argument
        the operator resizes), and whether it writes memory of another device (a copy_ into
        host memory from a device tensor)."""
        reads, writes, written = [], [], []
        writes_elsewhere = False
        nargs = len(args)
        for i, argname, is_write, also_read in args_plan:
            value = args[i] if i < nargs else kwargs.get(argname)
            if value is None:
                continue
            for t in _tensors(value):
                if t.device.type != self.device:
                    writes_elsewhere |= is_write
                    continue
                if is_write:
                    written.append(t)
                span = tensor_span(t)
                if span is None:
                    continue
                if is_write:
                    writes.append(span)
                    if also_read:
                        reads.append(span)
                else:
                    reads.append(span)
        return reads, writes, written, writes_elsewhere

    def _lift_fresh(self, func, args, kwargs):
        # torch.tensor(data, device=...) fills the tensor in C++ where no operator shows, then
        # lifts it: its bytes were written by the host just before.
        t = args[0] if args else None
        span = tensor_span(t) if isinstance(t, torch.Tensor) and self._on_device(t) else None
        if span is not None:
            self.rec.op("aten::lift_fresh (filled on the host)", self.current_stream(), [], [span],
                        self.site())
        return func(*args, **kwargs)

    def _record_stream(self, func, args, kwargs):
        out = func(*args, **kwargs)
        t, stream = args[0], args[1]
        span = tensor_span(t) if self._on_device(t) else None
        if span is not None:
            handle = stream.cuda_stream if hasattr(stream, "cuda_stream") else \
                torch.cuda.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                                  device_type=stream.device_type).cuda_stream
            self.rec.record_stream(span[0], span[1], handle, self.site())
        return out

    # Operators whose record is not what their schema says: by name, the method that records them.
    _SPECIAL = {"aten::lift_fresh": _lift_fresh, "aten::record_stream": _record_stream}

    def _span_on_device(self, t):
        return tensor_span(t) if t.device.type == self.device else None

    @staticmethod
    def _plan(func, name):
        """Per operator, once: which arguments it writes (and reads), whether it is a view."""
        schema = func._schema
        args_plan = []
        for i, arg in enumerate(schema.arguments):
            is_write = arg.alias_info is not None and arg.alias_info.is_write
            also_read = is_write and arg.name == "self" and name not in _OVERWRITE
            args_plan.append((i, arg.name, is_write, also_read))
        aliasing = any(r.alias_info is not None for r in schema.returns)
        returns = [r.alias_info is None for r in schema.returns]
        return args_plan, aliasing, name in _NO_ACCESS, returns

    # -- collectives ---------------------------------------------------------------------
    def _group(self, pg):
        import torch.distributed as dist
        hint = getattr(self._tls, "group_hint", None)
        if hint is not None and not isinstance(pg, dist.ProcessGroup):
            pg = hint  # torch 1.x: an opaque ScriptObject; the group whose method made the call
        if not isinstance(pg, dist.ProcessGroup) and hasattr(dist.ProcessGroup, "unbox"):
            try:
                pg = dist.ProcessGroup.unbox(pg)  # the dispatcher passes a ScriptObject
            except Exception:
                pass
        try:
            ranks = dist.get_process_group_ranks(pg)
        except Exception:
            ranks = list(range(dist.get_world_size()))
        name = None
        try:
            name = pg.group_name
        except Exception:
            try:
                name = dist.distributed_c10d._get_process_group_name(pg)
            except Exception:
                # torch 1.x: the names c10d gives its groups in creation order ("0" is WORLD),
                # which tell apart two groups of the same ranks.
                name = getattr(dist.distributed_c10d, "_pg_names", {}).get(pg)
        if not name or name == "None":
            name = "ranks " + ranks_name(ranks)
        elif pg is dist.group.WORLD or name == "0":
            name = "world"
        else:
            name = "group " + str(name)
        return self.rec.group(name, name, ranks), ranks, name

    def _describe(self, name, func, args, kwargs):
        """What one c10d call is: its Calls (collectives.py; None when the call is not
        understood), group, reduce, root, peer (group rank) and tag."""
        values = {}
        for i, arg in enumerate(func._schema.arguments):
            values[arg.name] = args[i] if i < len(args) else kwargs.get(arg.name)
        positional = [values[a.name] for a in func._schema.arguments]
        if "tensors" not in values and func._schema.arguments:
            # torch 1.x names the c10d operators' arguments _0, _1, ...: the first is the
            # tensor list of allreduce_, broadcast_ and reduce_ (what DDP issues from C++).
            values["tensors"] = positional[0]
        pg = next((values[a.name] for a in func._schema.arguments
                   if "ProcessGroup" in str(a.type)), None)
        red = next((values[a.name] for a in func._schema.arguments
                    if "ReduceOp" in str(a.type)), None)
        reduce = "none"
        if red is not None:
            hint = getattr(self._tls, "reduce_hint", None)
            reduce = hint if hint is not None else reduce_name(red)
        root = values.get("root_rank") or 0
        base = name.split("::", 1)[1]
        if base in _LIST_FORMS:
            calls, root = self._list_form(base, positional, values, pg)
            return _Described(calls, pg, reduce, root, None, 0)
        calls = []
        if base in ("allreduce_", "allreduce_coalesced_"):
            reduce = reduce if reduce != "none" else "sum"
            calls = [Call("all_reduce", t, t, t.numel()) for t in values["tensors"]]
        elif base in ("broadcast_",):
            calls = [Call("broadcast", t, t, t.numel()) for t in values["tensors"]]
        elif base in ("reduce_",):
            calls = [Call("reduce", t, t, t.numel()) for t in values["tensors"]]
        elif base in ("_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_"):
            for i_, o in _pairs(values, "input_tensor", "inputs", "output_tensor", "outputs"):
                calls.append(Call("reduce_scatter", i_, o, o.numel()))
        elif base in ("_allgather_base_", "allgather_into_tensor_coalesced_"):
            for i_, o in _pairs(values, "input_tensor", "inputs", "output_tensor", "outputs"):
                calls.append(Call("all_gather", i_, o, i_.numel()))
        elif base in ("alltoall_base_",):
            me, size = self._place(pg)
            calls = collectives.all_to_all_single(
                values["output"], values["input"], values.get("output_split_sizes"),
                values.get("input_split_sizes"), me, size)
        elif base == "barrier":
            calls = [Call("barrier", None, None, 0)]
        elif base in ("send", "recv_"):
            peer = values.get("dstRank", values.get("srcRank"))
            if peer is None and "_2" in values:  # torch 1.x: (tensors, group, peer, tag)
                peer, values["tag"] = values["_2"], values.get("_3", 0)
            calls = [Call("send" if base == "send" else "recv", t, t, t.numel())
                     for t in values["tensors"]]
            return _Described(calls, pg, reduce, root, peer, values.get("tag", 0))
        else:
            calls = None
        return _Described(calls, pg, reduce, root, None, 0)

    def _place(self, pg):
        """(this rank's group rank, the group's size)."""
        import torch.distributed as dist
        ranks = self._group(pg)[1]
        me = dist.get_rank()
        return (ranks.index(me) if me in ranks else 0), len(ranks)

    def _list_form(self, base, positional, values, pg):
        """The list forms (output list first, then input list, in torch 1.x and 2.x alike):
        (Calls or None, root as a group rank)."""
        outs, ins = positional[0], positional[1]
        if base == "allgather_" and len(outs) == 1 and len(ins) == 1:
            return collectives.all_gather_list(ins[0], outs[0]), 0
        if base == "reduce_scatter_" and len(outs) == 1 and len(ins) == 1:
            return collectives.reduce_scatter_list(ins[0], outs[0]), 0
        me, size = self._place(pg)
        if base in ("gather_", "scatter_"):
            root = values.get("root_rank", positional[3] if len(positional) > 3 else 0)
            if base == "gather_" and len(ins) == 1:
                return collectives.gather(ins[0], outs[0] if outs else [], root, me, size), root
            if base == "scatter_" and len(outs) == 1:
                return collectives.scatter(outs[0], ins[0] if ins else [], root, me, size), root
            return None, root
        if base == "alltoall_":
            return collectives.all_to_all(outs, ins, me, size), 0
        return None, 0

    def _c10d(self, func, name, args, kwargs):
        caller = self.current_stream()
        site = self.site()
        described = self._describe(name, func, args, kwargs)
        taken = self._inputs_before(described.calls)
        self._tls.depth = getattr(self._tls, "depth", 0) + 1
        outer = self._tls.depth > 1
        if not outer:
            self._tls.deferred = []
        pending = _PendingCollective(self, name, func, args, kwargs, described, caller, site, taken,
                                     [] if outer else self._tls.deferred)
        if not self.cuda:
            # No stream or event of the process group's own to place it between: it is written
            # now, before the backend has it, so a rank that fails or hangs in it still has it.
            pending.write(ran=False)
        self._tls.inside = True
        self._enter_collective(name, pending)
        try:
            out = func(*args, **kwargs)
        except BaseException:
            self._left_collective(outer)
            pending.write(ran=False)  # it never ran: no digests of what it would have written
            raise
        self._left_collective(outer)
        pending.write(ran=True)
        return out

    def _left_collective(self, outer):
        self._leave_collective()
        self._tls.inside = False
        self._tls.depth -= 1
        if not outer:
            self._tls.deferred = []

    def _write_c10d(self, p, ran):
        """Writes what _PendingCollective p holds: the process group's own records made during the
        call, and the collective where it runs: on the process group's internal stream, after
        that stream's wait for the caller's and before its end event; or on the caller's stream,
        before the process group's end event there. ran: the call returned (on CUDA, then, its
        outputs' digests are taken behind it)."""
        during = p.during
        internal = None
        for fn, a in during:
            if fn == self.rec.event_wait and a[1] != p.caller:
                internal = a[1]
                break
        split = len(during)
        if internal is not None:
            for i, (fn, a) in enumerate(during):
                if fn == self.rec.event_record and a[1] == internal:
                    split = i
                    break
        else:
            # A blocking collective in torch >= 2.6: between the process group's start and end
            # events on the caller's stream, so the end event covers it.
            records = [i for i, (fn, a) in enumerate(during)
                       if fn == self.rec.event_record and a[1] == p.caller]
            if records:
                split = records[-1]
        for fn, a in during[:split]:
            fn(*a)
        stream = internal if internal is not None else p.caller
        d = p.described
        if internal is not None and d.pg is not None and not self.rec.has_stream(internal):
            self.rec.stream(internal, self._internal_name(d.pg, d.peer, d.calls))
        if d.calls is None:
            self._record_unknown(p.func, p.name, p.args, p.kwargs, stream, p.site)
        else:
            self._record_calls(p.name, d.calls, d.pg, d.reduce, d.root, d.peer, d.tag, stream,
                               p.site, p.taken, outputs=ran and self.cuda)
        for fn, a in during[split:]:
            fn(*a)

    def _internal_name(self, pg, peer, calls):
        """A process group's internal stream as findings name it: NCCL runs p2p outside a batch
        on a communicator and stream per pair of ranks ("low:high"), the rest on the group's."""
        _, ranks, name = self._group(pg)
        if peer is None or p2p.batching() or not calls or not 0 <= peer < len(ranks):
            return "nccl " + name
        me = torch.distributed.get_rank()
        low, high = sorted((me, ranks[peer]))
        return "nccl %s p2p %d:%d" % (name, low, high)

    def _host_filled(self, func, name, args, site):
        """torch 1.x: a c10d operator that reaches the dispatcher comes from C++ (DDP's checks
        and state sync at construction; Python's torch.distributed calls are wrapped instead),
        whose CPU tensors were filled through raw pointers that no operator shows. Their inputs
        are recorded as written on the host just before, so that they are not taken for memory
        nobody wrote."""
        if self.cuda or not args:
            return
        lists = name.split("::", 1)[1] in ("allgather_", "reduce_scatter_", "gather_", "scatter_",
                                           "alltoall_", "allgather_coalesced_")
        inputs = args[1] if lists and len(args) > 1 else args[0]
        spans = [sp for sp in (tensor_span(t) for t in _tensors(inputs) if self._on_device(t))
                 if sp is not None]
        if spans:
            self.rec.op(name + " inputs (filled on the host)", 0, [], spans, site)

    def _inputs_before(self, name, func, args, kwargs):
        """Digests of what each collective of the call reads, taken before it runs (an
        all_reduce overwrites its input); None when values are off or it is not one."""
        if self.values is None:
            return None
        calls = self._describe(name, func, args, kwargs)[0]
        if calls is None:
            return None
        return [self.values.coll_input(i_) if op not in ("send", "recv", "barrier")
                and i_ is not None and self._on_device(i_) else None
                for op, i_, o, count in calls]

    def _record_unknown(self, func, name, args, kwargs, stream, site):
        """A c10d operator not recorded as a collective (the list forms of all_gather and
        reduce_scatter, coalesced and object collectives): still its memory accesses, on the
        stream it runs on. Arguments named output are written, input read, and a plain
        `tensors` list (in place) both."""
        reads, writes = [], []
        for i, arg in enumerate(func._schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            spans = [sp for sp in (tensor_span(t) for t in _tensors(value)
                                   if t.device.type == self.device) if sp is not None]
            if not spans:
                continue
            lowered = arg.name.lower()
            if lowered in ("_0", "_1") and len(func._schema.arguments) > 2:
                # torch 1.x leaves them unnamed: the list forms (allgather_, reduce_scatter_,
                # gather_, scatter_, alltoall_) take the outputs first, then the inputs.
                lowered = "output" if lowered == "_0" else "input"
            if "output" in lowered:
                writes += spans
            elif "input" in lowered:
                reads += spans
            else:
                reads += spans
                writes += spans
        if self.cuda and not self.rec.has_stream(stream):
            self.rec.stream(stream, "nccl")
        self.rec.op(name, stream, reads, writes, site)

    def _inputs_before(self, calls):
        """Digests of what each collective of the call reads, taken before it runs (an
        all_reduce overwrites its input); None when values are off or it is not one."""
        if self.values is None or calls is None:
            return None
        return [self.values.coll_input(c.inp) if c.op not in _NOT_COLLECTIVES
                and c.inp is not None and self._on_device_all(c.inp) else None for c in calls]

    def _on_device_all(self, side):
        return all(self._on_device(t) for t in collectives.tensors_of(side))

    def _spans(self, side):
        """A call's side as the recorder takes it: a span, a list of spans (a list form's list
        side), or None where some tensor has no bytes."""
        if isinstance(side, (list, tuple)):
            spans = [tensor_span(t) for t in side]
            return None if any(sp is None for sp in spans) else spans
        return tensor_span(side)

    def _record_calls(self, name, calls, pg, reduce, root, peer, tag, stream, site, taken=None,
                      outputs=False):
        """Writes a call's Calls on ``stream`` (peer: the group rank of plain send/recv).
        taken: the inputs' digests, one per call, taken before the call ran; otherwise they are
        taken here. outputs: the call has been issued on CUDA, so its outputs' digests are taken
        behind it on ``stream``. Returns [(collective index, output)] of those written."""
        if pg is None:
            return []
        gid, ranks, _ = self._group(pg)
        if self.cuda and not self.rec.has_stream(stream):
            self.rec.stream(stream, "nccl %s" % ranks_name(ranks))
        indices = []  # (collective index, output) of those written, for their output digests
        for n, c in enumerate(calls):
            if c.inp is not None and not (self._on_device_all(c.inp) and
                                          self._on_device_all(c.out)):
                continue
            first = collectives.tensors_of(c.inp)[0] if c.inp is not None else None
            dtype = _DTYPES.get(first.dtype, "u8") if first is not None else "u8"
            count = c.count
            if first is not None and first.dtype not in _DTYPES:
                count *= first.element_size()
            if c.op in _NOT_COLLECTIVES:
                self._record_part(name, c, ranks, gid, stream, dtype, count, peer, tag, site)
                continue
            ispan, ospan = (self._spans(c.inp), self._spans(c.out)) if c.op != "barrier" \
                else (None, None)
            if c.op != "barrier" and (ispan is None or ospan is None):
                continue
            index = self.rec.collective(c.op, gid, stream, ispan, ospan, dtype, count, reduce, root,
                                        name, site)
            if self.values is not None and c.op != "barrier":
                digest = taken[n] if taken is not None and n < len(taken) else \
                    self.values.coll_input(c.inp)
                self.values.bind_coll(digest, index, site)
                if outputs:  # it has been issued: behind it, its output
                    self.values.bind_coll(self.values.coll_output(c.out, stream), index, site,
                                          "out")
                indices.append((index, c.out))
        return indices

    def _record_part(self, name, c, ranks, gid, stream, dtype, count, peer, tag, site):
        """A transfer half, or the copy of the rank's own part, of a call (collectives.py)."""
        if c.op == "copy":
            spans = [tensor_span(c.inp)], [tensor_span(c.out)]
            if spans[0][0] is not None and spans[1][0] is not None:
                self.rec.op("aten::copy_", stream, spans[0], spans[1], site)
            return
        span = tensor_span(c.inp)
        if span is None:
            return
        # A plain send or recv has no name: its two halves' operators are named differently
        # (c10d::send, c10d::recv_), and names are compared across the pair; the transfers a
        # call is made of are named for it on both sides.
        own = c.peer is not None
        self.rec.p2p(c.op, ranks[c.peer if own else peer], gid, stream, span, dtype, count,
                     str(tag), name if own else "", site, batch=p2p.batching())

    # -- torch.distributed before 2.0: wrap the functions -------------------------------
    def _wrap_distributed(self):
        """Each torch.distributed function that makes a collective records it, before the
        backend has it, at the program's line: a rank whose backend raises or hangs in it still
        has it in its file. Their c10d operators reach the dispatcher too (torch 1.13), where
        they are then passed through."""
        import torch.distributed as dist
        for fname, calls_of in _WRAPPED.items():
            orig = getattr(dist, fname, None)
            if orig is not None:
                self._patch(dist, fname, lambda orig, fname=fname, calls_of=calls_of:
                            self._wrapped(fname, orig, calls_of))

    def _wrapped(self, fname, orig, calls_of):
        import inspect

        import torch.distributed as dist
        hooks = self
        signature = inspect.signature(orig)

        def wrapped(*args, **kwargs):
            if getattr(hooks._tls, "inside", False):  # one wrapped function calling another
                return orig(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            group = a.get("group") or dist.distributed_c10d._get_default_group()
            if dist.distributed_c10d._rank_not_in_group(group):
                return orig(*args, **kwargs)  # no collective on this rank
            ranks = dist.get_process_group_ranks(group)
            me = ranks.index(dist.get_rank())
            root = ranks.index(a["src"] if "src" in a else a["dst"]) \
                if "src" in a or "dst" in a else 0
            calls = calls_of(a, root, me, len(ranks))
            if calls is None:  # its own arguments disagree: the backend refuses it here
                return orig(*args, **kwargs)
            reduce = reduce_name(a["op"]) if "op" in a else "none"
            site = hooks.site()
            what = "torch.distributed." + fname
            written = hooks._record_calls(what, calls, group, reduce, root, None, 0,
                                          hooks.current_stream(), site)
            hooks._tls.inside = True
            hooks._enter_collective(what)
            try:
                result = orig(*args, **kwargs)
            finally:
                hooks._leave_collective()
                hooks._tls.inside = False
            if hooks.values is not None and not a.get("async_op") and not hooks.cuda:
                for index, out in written:  # finished: what it wrote
                    hooks.values.bind_coll(hooks.values.coll_output(out), index, site, "out")
            return result

        return wrapped

    def _follow_p2p(self):
        """Point-to-point requests (p2p.py): on CPU, gloo's, which the capture records itself;
        everywhere, batch_isend_irecv's batches."""
        p2p.follow_batches(self._patch)
        if not self.cuda:
            p2p.Requests(self, self._patch, _quiet, tensor_span, dtype_and_count).install()

    def _hint_p2p_groups(self):
        """torch 1.x hands the c10d operators of a send or recv an opaque ScriptObject for its
        process group, whose ranks and name Python cannot read: the group is the ProcessGroup
        whose send or recv method the program's torch.distributed call went through (without
        it, every such transfer was recorded on the world's ranks, under a name no other record
        of the group has)."""
        import torch.distributed as dist
        hooks = self

        def make(orig):
            def call(pg, *args, **kwargs):
                previous = getattr(hooks._tls, "group_hint", None)
                hooks._tls.group_hint = pg
                try:
                    return orig(pg, *args, **kwargs)
                finally:
                    hooks._tls.group_hint = previous
            return call

        for name in ("send", "recv"):
            if hasattr(getattr(dist, "ProcessGroup", None), name):
                self._patch(dist.ProcessGroup, name, make)

    def _follow_monitored_barrier(self):
        """monitored_barrier (gloo's): a barrier of its group that the backend makes of sends
        to and from the group's rank 0, which no c10d operator shows. Recorded as the group's
        barrier before it runs, so that a rank whose peers never come (the barrier times out
        and raises) still has it in its file."""
        import torch.distributed as dist
        if not hasattr(getattr(dist, "ProcessGroup", None), "monitored_barrier"):
            return
        hooks = self

        def make(orig):
            def monitored_barrier(pg, *args, **kwargs):
                hooks._record_calls("torch.distributed.monitored_barrier",
                                    [Call("barrier", None, None, 0)], pg, "none", 0, None, 0,
                                    hooks.current_stream(), hooks.site())
                inside = getattr(hooks._tls, "inside", False)
                hooks._tls.inside = True
                hooks._enter_collective("torch.distributed.monitored_barrier")
                try:
                    return orig(pg, *args, **kwargs)
                finally:
                    hooks._leave_collective()
                    hooks._tls.inside = inside
            return monitored_barrier

        self._patch(dist.ProcessGroup, "monitored_barrier", make)

    def _follow_any_source(self):
        """A recv from any source (dist.recv or dist.irecv without src): the process group's
        recv_anysource, which no c10d operator records with its sender. The sender is known
        once the recv has finished (work._source_rank()): the recv is recorded then, at the line
        that issued it, from that sender. A blocking recv finishes before its rank issues
        anything else, so its record stands where it was issued; an irecv's stands where its
        work is waited for. A recv whose work is never waited for from Python is not recorded."""
        import torch.distributed as dist
        work_type = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)
        if work_type is None or not hasattr(getattr(dist, "ProcessGroup", None),
                                            "recv_anysource"):
            return
        hooks = self
        pending = {}  # id(work) -> (work, tensors, group, tag, stream, site)

        def make_recv(orig):
            def recv_anysource(pg, tensors, tag=0, *args, **kwargs):
                site, stream = hooks.site(), hooks.current_stream()
                inside = getattr(hooks._tls, "inside", False)
                hooks._tls.inside = True  # its c10d operator, where there is one, has no sender
                try:
                    work = orig(pg, tensors, tag, *args, **kwargs)
                finally:
                    hooks._tls.inside = inside
                pending[id(work)] = (work, list(tensors), pg, tag, stream, site)
                return work
            return recv_anysource

        def make_wait(orig):
            def wait(work, *args, **kwargs):
                out = orig(work, *args, **kwargs)
                entry = pending.pop(id(work), None)
                if entry is not None:
                    _, tensors, pg, tag, stream, site = entry
                    hooks._record_calls("torch.distributed.recv",
                                        [Call("recv", t, t, t.numel()) for t in tensors], pg, "none",
                                        0, work._source_rank(), tag, stream, site)
                return out
            return wait

        self._patch(dist.ProcessGroup, "recv_anysource", make_recv)
        self._patch(work_type, "wait", make_wait)

    def _hint_reduce_ops(self):
        """The dispatcher passes a ReduceOp as an opaque script object: take the reduction
        from the torch.distributed call that makes the collective, where Python has it."""
        import inspect

        import torch.distributed as dist
        hooks = self
        for fname in ("all_reduce", "reduce", "reduce_scatter_tensor", "reduce_scatter",
                      "all_reduce_coalesced", "_reduce_scatter_base"):
            orig = getattr(dist, fname, None)
            if orig is None:
                continue
            try:
                sig = inspect.signature(orig)
            except (TypeError, ValueError):
                continue
            if "op" not in sig.parameters:
                continue

            def wrapped(*args, _orig=orig, _sig=sig, **kwargs):
                bound = _sig.bind_partial(*args, **kwargs)
                op = bound.arguments.get("op", _sig.parameters["op"].default)
                previous = getattr(hooks._tls, "reduce_hint", None)
                hooks._tls.reduce_hint = reduce_name(op)
                try:
                    return _orig(*args, **kwargs)
                finally:
                    hooks._tls.reduce_hint = previous

            setattr(dist, fname, wrapped)
            self._patched.append((dist, fname, orig))

    # -- install -------------------------------------------------------------------------
    def _name_streams(self):
        """Names each stream the program creates by where it creates it."""
        hooks = self
        orig = torch.cuda.Stream.__new__

        def new(cls, *args, **kwargs):
            stream = orig(cls, *args, **kwargs)
            site = _user_frame(sys._getframe(1))
            if site is not None:
                hooks.rec.stream_names.setdefault(
                    stream.cuda_stream, "stream from %s:%d" % (
                        _relpath(site.f_code.co_filename), site.f_lineno))
            return stream

        torch.cuda.Stream.__new__ = new
        self._patched.append((torch.cuda.Stream, "__new__", orig))

    def _follow_graphs(self):
        """CUDA graphs: a capture keeps its kernels and its events (the recorder writes nothing
        they do), each replay issues them at its line: the capture stream's on the stream
        current at g.replay(), a side stream's on one of the graph's own."""
        graph_class = getattr(torch.cuda, "CUDAGraph", None)
        if graph_class is None or not hasattr(graph_class, "replay"):
            return
        hooks = self

        def patch(name, around):
            orig = getattr(graph_class, name)

            def wrapped(graph, *args, **kwargs):
                return around(orig, graph, *args, **kwargs)

            setattr(graph_class, name, wrapped)
            self._patched.append((graph_class, name, orig))

        def begin(orig, graph, *args, **kwargs):
            out = orig(graph, *args, **kwargs)
            hooks.rec.graph_begin(hooks.current_stream())
            return out

        def end(orig, graph, *args, **kwargs):
            try:
                return orig(graph, *args, **kwargs)
            finally:
                hooks.rec.graph_end(id(graph))

        def replay(orig, graph, *args, **kwargs):
            out = orig(graph, *args, **kwargs)
            hooks.rec.graph_replay(id(graph), hooks.current_stream(), hooks.site())
            return out

        def reset(orig, graph, *args, **kwargs):
            hooks.rec.graph_reset(id(graph))
            return orig(graph, *args, **kwargs)

        patch("capture_begin", begin)
        patch("capture_end", end)
        patch("replay", replay)
        if hasattr(graph_class, "reset"):
            patch("reset", reset)

    def _follow_empty_cache(self):
        """torch.cuda.empty_cache() gives cached segments back with cudaFree, which waits for
        the whole device: where it released any, the host has synchronized (and the addresses
        may come back to any stream)."""
        hooks = self
        orig = torch.cuda.empty_cache

        def empty_cache():
            before = torch.cuda.memory_reserved()
            orig()
            if torch.cuda.memory_reserved() < before and not hooks.rec.capturing():
                hooks.rec.device_sync(hooks.site())

        torch.cuda.empty_cache = empty_cache
        self._patched.append((torch.cuda, "empty_cache", orig))

    def _follow_queries(self):
        """Event.query() and Stream.query() called by the program that answer True: the host
        has seen the work they cover finished, as a synchronize would have shown it (a loop
        that polls an event before using what it covers is ordered after that work). No trace
        callback reports a query."""
        hooks = self

        def make(sync, handle):
            def wrap(orig):
                def query(obj):
                    done = orig(obj)
                    if done and not getattr(_quiet, "on", False) and \
                            not hidden(sys._getframe(1).f_code.co_filename) and \
                            not hooks.rec.capturing():
                        sync(getattr(obj, handle))
                    return done
                return query
            return wrap

        self._patch(torch.cuda.Event, "query", make(self.on_event_sync, "cuda_event"))
        self._patch(torch.cuda.Stream, "query", make(self.on_stream_sync, "cuda_stream"))

    def _patch(self, owner, name, make):
        """Replaces owner.name by make(the original), undone at uninstall."""
        orig = getattr(owner, name)
        setattr(owner, name, make(orig))
        self._patched.append((owner, name, orig))

    def _follow_threads(self):
        """Threads the program starts, and what hands work from one to another (handovers)."""
        handovers.Follower(self, self._patch, _Mode, _origin, _quiet, _OWN_DIR,
                           hidden).install()

    def _follow_backward(self):
        """backward() (or autograd.grad) on a thread other than the main one: autograd's
        device threads run its nodes while that thread waits, so their work is on its
        timeline and named by its line."""
        hooks = self

        def make(orig):
            def wrapped(*args, **kwargs):
                ident = threading.get_ident()
                if ident == _main_ident:
                    return orig(*args, **kwargs)
                entry = (ident, hooks.timeline())
                hooks._backward_by.append(entry)
                try:
                    return orig(*args, **kwargs)
                finally:
                    hooks._backward_by.remove(entry)
            return wrapped

        self._patch(torch.autograd, "backward", make)
        self._patch(torch.autograd, "grad", make)

    def install(self):
        if self.cuda:
            self._install_trace()
            self._name_streams()
            self._follow_graphs()
            self._follow_empty_cache()
            self._follow_queries()
        self._follow_threads()
        self._follow_backward()
        try:
            import torch.distributed  # noqa: F401
            if self._c10d_dispatched:
                self._hint_reduce_ops()
            else:
                self._wrap_distributed()
                if self.cuda:  # on CPU, p2p.Requests records gloo's transfers with their group
                    self._hint_p2p_groups()
            self._follow_p2p()
            if self.cuda:  # on CPU, p2p.Requests follows a recv from any source
                self._follow_any_source()
            self._follow_monitored_barrier()
        except ImportError:
            pass
        self._mode = _Mode(self)
        self._mode.__enter__()

    def uninstall(self):
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for obj, name, orig in reversed(self._patched):
            setattr(obj, name, orig)
        self._patched = []
        _Router.active = None

    def _install_trace(self):
        _Router.install()
        _Router.active = self


class _Quiet(threading.local):
    """A thread, or a stretch of one, whose work is not the program's: a backend's own (host
    copies, its worker), whose trace callbacks and operators are not recorded; and every
    thread of a process forked from a rank (a DataLoader worker), whose work is no rank's."""

    forked = False  # set in a forked child, for every thread it has

    def __init__(self):
        self._on = False

    @property
    def on(self):
        return self._on or _Quiet.forked

    @on.setter
    def on(self, value):
        self._on = value


_quiet = _Quiet()


def _forked_child():
    _Quiet.forked = True


os.register_at_fork(after_in_child=_forked_child)


class quiet:
    """with quiet(): the trace callbacks inside are the backend's, not the program's."""

    def __enter__(self):
        self._was = getattr(_quiet, "on", False)
        _quiet.on = True

    def __exit__(self, *exc):
        _quiet.on = self._was
        return False


def quiet_thread():
    """The calling thread's CUDA work is a backend's own from now on."""
    _quiet.on = True


def user_where():
    """(file, line, func) of the user's line that led here."""
    return where(sys._getframe(1))


def backend_stream(stream, name):
    """Names a process group's internal stream in the capture, before its first record."""
    h = _Router.active
    if h is not None:
        h.rec.stream_names[stream.cuda_stream] = name


def backend_collective(name, calls, pg, reduce, root, peer, tag, stream):
    """Records what a process group written in Python issues (it reaches no c10d operator the
    dispatch mode could see): ``calls`` as Hooks._describe gives them, on ``stream``, at the
    user's line. Called before the collective is issued, so a rank that hangs or fails in it
    still has it in its file."""
    h = _Router.active
    if h is None or getattr(_quiet, "on", False):
        return []
    return h._record_calls(name, calls, pg, reduce, root, peer, tag, stream.cuda_stream,
                           h.site()) or []


def backend_outputs(written, stream):
    """The outputs of collectives that a process group written in Python has issued on
    ``stream``: their digests, taken there behind them (``written``: what backend_collective
    returned for them)."""
    h = _Router.active
    if h is None or h.values is None or not written or getattr(_quiet, "on", False):
        return
    site = h.site()
    for index, out in written:
        h.values.bind_coll(h.values.coll_output(out, stream.cuda_stream), index, site, "out")


def backend_done(event):
    """A Work of a process group written in Python told the program it is done
    (is_completed() answered True): the host has seen its end event pass, as a sync shows it."""
    h = _Router.active
    if h is not None and not getattr(_quiet, "on", False):
        h.on_event_sync(event.cuda_event)


def backend_op(name, reads, writes, stream):
    """A collective the capture format has no record for (the list forms of all_gather,
    reduce_scatter and all_to_all; gather, scatter): its reads and writes on ``stream``, as
    the capture records them on NCCL."""
    h = _Router.active
    if h is None or getattr(_quiet, "on", False):
        return
    spans = [[tensor_span(t) for t in ts if h._on_device(t)] for ts in (reads, writes)]
    if not h.rec.has_stream(stream.cuda_stream):
        h.rec.stream(stream.cuda_stream)
    h.rec.op(name, stream.cuda_stream, [s for s in spans[0] if s], [s for s in spans[1] if s],
             h.site())


# The ReduceOp object of the torch.distributed call in progress on this thread, as the caller
# passed it: a backend written in Python gets a copy without a PREMUL_SUM's factor.
_op_hint = threading.local()


class reduce_op:
    def __init__(self, op):
        self.op = op

    def __enter__(self):
        self._was = getattr(_op_hint, "op", None)
        _op_hint.op = self.op

    def __exit__(self, *exc):
        _op_hint.op = self._was
        return False


def current_reduce_op():
    return getattr(_op_hint, "op", None)


# Frees a backend makes once it has seen the collectives that used the memory finish (as
# ProcessGroupNCCL's watchdog hands back the tensors it stashed): the host has, in effect,
# waited for their streams.
_background = threading.local()


class background_frees:
    def __enter__(self):
        self._was = getattr(_background, "on", False)
        _background.on = True

    def __exit__(self, *exc):
        _background.on = self._was
        return False


# The _c10d_functional operators (DTensor's collectives) on a group the one-GPU backend runs:
# onegpu.py sets it to a function that runs them, or returns NotImplemented.
_functional = None


def route_functional(fn):
    global _functional
    _functional = fn


def register_trace_callback(what, fn):
    """Registers fn for torch's GPU trace callback `what` ("memory_allocation", "event_record",
    ...) under the module and names this torch has, and turns the trace on."""
    try:
        import torch.cuda._gpu_trace as t
        prefix = "register_callback_for_"
        activate = getattr(torch._C, "_activate_gpu_trace", None)
    except ImportError:
        import torch.utils._cuda_trace as t
        prefix = "register_callback_for_cuda_"
        activate = getattr(torch._C, "_activate_cuda_trace", None)
    getattr(t, prefix + what)(fn)
    if activate is not None:
        activate()


class _Router:
    """Torch's trace callbacks cannot be removed once registered: route them to the active
    capture, if any."""

    active = None
    installed = False

    @classmethod
    def install(cls):
        if cls.installed:
            return

        def route(method):
            def cb(*args):
                h = cls.active
                if h is not None and not getattr(_quiet, "on", False):
                    getattr(h, method)(*args)
            return cb

        for what, method in (("event_creation", "on_event_create"),
                             ("event_deletion", "on_event_delete"),
                             ("event_record", "on_event_record"),
                             ("event_wait", "on_event_wait"),
                             ("memory_allocation", "on_alloc"),
                             ("memory_deallocation", "on_free"),
                             ("stream_synchronization", "on_stream_sync"),
                             ("device_synchronization", "on_device_sync"),
                             ("event_synchronization", "on_event_sync")):
            register_trace_callback(what, route(method))
        cls.installed = True


def ranks_name(ranks):
    return "[" + ",".join(str(r) for r in ranks) + "]"


def _tensor_form(op, inp, out, side):
    """A wrapped function's one collective: its input and output arguments, and the side whose
    elements are its count."""
    def calls(a, root, me, size):
        i_, o = (a[inp] if inp else None), (a[out] if out else None)
        t = i_ if side == "in" else o
        return [Call(op, i_, o, t.numel() if t is not None else 0)]
    return calls


# torch.distributed's functions in torch 1.x, which the capture wraps (Hooks._wrap_distributed):
# name -> (bound arguments, root, this rank's group rank, group size) -> Calls, or None where the
# call's own arguments disagree.
_WRAPPED = {
    "all_reduce": _tensor_form("all_reduce", "tensor", "tensor", "in"),
    "broadcast": _tensor_form("broadcast", "tensor", "tensor", "in"),
    "reduce": _tensor_form("reduce", "tensor", "tensor", "in"),
    "all_gather_into_tensor": _tensor_form("all_gather", "input_tensor", "output_tensor", "in"),
    "_all_gather_base": _tensor_form("all_gather", "input_tensor", "output_tensor", "in"),
    "reduce_scatter_tensor": _tensor_form("reduce_scatter", "input", "output", "out"),
    "_reduce_scatter_base": _tensor_form("reduce_scatter", "input", "output", "out"),
    "barrier": lambda a, root, me, size: [Call("barrier", None, None, 0)],
    "all_to_all_single": lambda a, root, me, size: collectives.all_to_all_single(
        a["output"], a["input"], a["output_split_sizes"], a["input_split_sizes"], me, size),
    "all_gather": lambda a, root, me, size: collectives.all_gather_list(a["tensor"],
                                                                         a["tensor_list"]),
    "reduce_scatter": lambda a, root, me, size: collectives.reduce_scatter_list(a["input_list"],
                                                                                 a["output"]),
    "gather": lambda a, root, me, size: collectives.gather(a["tensor"], a["gather_list"] or [],
                                                           root, me, size),
    "scatter": lambda a, root, me, size: collectives.scatter(a["tensor"], a["scatter_list"] or [],
                                                             root, me, size),
    "all_to_all": lambda a, root, me, size: collectives.all_to_all(
        a["output_tensor_list"], a["input_tensor_list"], me, size),
}
