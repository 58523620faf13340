"""A c10d backend that lets several processes share one GPU with ProcessGroupNCCL's stream
semantics, so a program written for N GPUs on NCCL runs, and is captured, on one.

NCCL refuses two ranks of one communicator on one GPU. This backend keeps what a program sees
of ProcessGroupNCCL (torch 2.11, ProcessGroupNCCL.cpp) and moves the data another way:

- One internal stream per group. Issuing a collective records an event on the caller's
  current stream and makes the internal stream wait for it; everything the collective does
  to its tensors happens on the internal stream, asynchronously to the compute stream, so a
  program that touches a tensor before waiting races on the hardware as it would on NCCL.
- On the internal stream: the inputs are copied into pinned host memory; the stream then
  waits (cuStreamWaitValue32, a wait in the stream itself: no kernel, no host thread) on a
  counter in pinned memory; the outputs are copied back from pinned memory; an end event is
  recorded. A worker thread per group takes the collectives in issue order, waits for the
  inputs to reach host memory, runs the collective among the processes with gloo on the host
  copies, and raises the counter. Nothing on the issuing thread blocks.
- ``work.wait()`` makes the current stream wait for the end event and returns; the Work's
  future is CUDA-aware and completed on the internal stream, as NCCL's is, so DDP's
  communication hooks see the same ordering. ``async_op=False`` is c10d's own wait.
- Inputs and outputs are kept alive for the internal stream with ``record_stream`` (recorded
  in the capture as on NCCL); under ``TORCH_NCCL_AVOID_RECORD_STREAMS=1`` the Work holds them
  until it is waited for instead.
- A coalesced group (``_coalescing_manager``, ``batch_isend_irecv``) is one job on the worker
  and ends with one event.

Barrier and CPU tensors block the host, as gloo's do. The capture records each collective on
the internal stream with the caller's start event and the end event, never the backend's own
copies (hooks.quiet()).
"""

import ctypes
import os
import queue
import threading
import time
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

from . import hooks as _hooks

NAME = "shardcheck"
_CU_STREAM_WAIT_VALUE_GEQ = 0x0


class BackendError(RuntimeError):
    pass


def _driver_wait_value():
    """cuStreamWaitValue32 from the CUDA driver, or None with why."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, "libcuda.so.1 not found (%s)" % e
    for name in ("cuStreamWaitValue32_v2", "cuStreamWaitValue32"):
        fn = getattr(cuda, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            fn.restype = ctypes.c_int
            return fn, None
    return None, "the CUDA driver has no cuStreamWaitValue32"


_wait_value = None


def _stream_wait_value(stream, flag_ptr, value):
    global _wait_value
    if _wait_value is None:
        fn, why = _driver_wait_value()
        if fn is None:
            raise BackendError("shardcheck one-GPU backend: " + why)
        _wait_value = fn
    rc = _wait_value(stream.cuda_stream, flag_ptr, value & 0xFFFFFFFF, _CU_STREAM_WAIT_VALUE_GEQ)
    if rc != 0:
        raise BackendError("shardcheck one-GPU backend: cuStreamWaitValue32 failed with CUDA "
                           "driver error %d (stream memory operations unsupported here?)" % rc)


def _reduce_key(op):
    """'SUM', 'AVG', 'PREMUL_SUM', ... of the ReduceOp in an options object."""
    red = getattr(op, "op", op)
    text = str(red)
    return text.rsplit(".", 1)[-1].upper()


def _premul_factor(opts_op):
    """The factor of a PREMUL_SUM, where torch lets Python read it."""
    for attr in ("factor", "_factor"):
        v = getattr(opts_op, attr, None)
        if v is not None:
            return float(v) if not isinstance(v, torch.Tensor) else v.item()
    raise BackendError("shardcheck one-GPU backend: a PREMUL_SUM whose factor torch does not "
                       "expose to Python")


class _Job:
    """One collective (or coalesced group) on a group's worker: what to run on the host
    copies, which value of the group's counter releases its outputs."""

    __slots__ = ("run", "staged", "seq", "done", "error", "what", "site", "since", "keep")

    def __init__(self, run, staged, seq, what, site, keep):
        self.run, self.staged, self.seq = run, staged, seq
        self.done = threading.Event()
        self.error = None
        self.what, self.site, self.since, self.keep = what, site, time.monotonic(), keep


_pending = weakref.WeakSet()


def oldest_pending():
    """(what, since, (file, line, func)) of the oldest unfinished collective of any group."""
    best = None
    for g in list(_pending):
        j = g._current
        if j is not None and not j.done.is_set() and (best is None or j.since < best.since):
            best = j
    return None if best is None else (best.what, best.since, best.site)


class _Work(dist._Work if hasattr(dist, "_Work") else dist.Work):
    def __init__(self, group, end, future, job, host_blocking, keep):
        super().__init__()
        self._group, self._end, self._future = group, end, future
        self._job, self._host_blocking, self._keep = job, host_blocking, keep

    def wait(self, timeout=timedelta(0)):
        job = self._job
        if self._host_blocking and job is not None:
            job.done.wait()
        if job is not None and job.error is not None:
            raise BackendError(job.error)
        if self._end is not None:
            torch.cuda.current_stream().wait_event(self._end)
        self._keep = None
        return True

    def is_completed(self):
        return self._job is None or self._job.done.is_set()

    def is_success(self):
        return self._job is None or self._job.error is None

    def get_future(self):
        return self._future

    def exception(self):
        return None if self._job is None or self._job.error is None else BackendError(self._job.error)


class OneGpuGroup(dist.ProcessGroup):
    """The process group c10d gets for "nccl" under the capture: see the module's text."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._timeout = timeout
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("shardcheck-gloo/", store), rank,
                                           size, timeout)
        self._name = ""
        self._desc = ""
        self._stream = None
        self._flag = None
        self._seq = 0
        self._queue = queue.Queue()
        self._worker = None
        self._current = None
        self._coalescing = None
        self._sends = []
        self._avoid_record_streams = os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS") == "1"
        _pending.add(self)

    # -- identity, as c10d and DeviceMesh ask for it -------------------------------------
    def getBackendName(self):
        return NAME

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

    def setGroupDesc(self, desc):
        self._desc = desc

    def getGroupDesc(self):
        return self._desc

    @property
    def supports_coalescing(self):
        return True

    # -- the machinery ---------------------------------------------------------------------
    def _cuda_setup(self):
        if self._stream is None:
            with _hooks.quiet():
                self._stream = torch.cuda.Stream()
                self._flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
            self._worker = threading.Thread(target=self._serve, daemon=True,
                                            name="shardcheck-onegpu %s" % self._name)
            self._worker.start()

    def _serve(self):
        _hooks.quiet_thread()
        while True:
            job = self._queue.get()
            self._current = job
            try:
                if job.staged is not None:
                    job.staged.synchronize()
                if job.what != "send":
                    self._reap_sends()
                job.run()
            except Exception as e:
                job.error = "collective %s failed on rank %d: %s" % (job.what, self._rank, e)
                _fatal(job)
            finally:
                job.keep = None
                if job.seq is not None:
                    ctypes.c_int32.from_address(self._flag.data_ptr()).value = job.seq & 0x7FFFFFFF
                job.done.set()

    def _reap_sends(self):
        sends, self._sends = self._sends, []
        for w, _ in sends:
            w.wait()

    def _issue(self, what, tensors_in, tensors_out, host_fn, host_blocking=False):
        """Runs one collective: host_fn(host_in, host_out) on pinned copies of the inputs makes
        the host copies of the outputs (in place where an output is an input)."""
        if self._coalescing is not None:
            self._coalescing.append((what, tensors_in, tensors_out, host_fn))
            return _Work(self, None, _done_future([]), None, False, None)
        return self._launch(what, [(tensors_in, tensors_out, host_fn)], host_blocking)

    def _launch(self, what, parts, host_blocking):
        tensors = [t for ins, outs, _ in parts for t in list(ins) + list(outs)]
        cuda = [t for t in tensors if t.is_cuda]
        if not cuda:
            return self._launch_host(what, parts)
        self._cuda_setup()
        s = self._stream
        caller = torch.cuda.current_stream()
        site = _hooks.user_where()
        self._seq += 1
        seq = self._seq
        start = torch.cuda.Event()
        end = torch.cuda.Event()
        start.record(caller)  # seen by the capture: the internal stream waits for the caller
        s.wait_event(start)
        staged = torch.cuda.Event()
        host = []
        with _hooks.quiet(), torch.cuda.stream(s):
            for ins, outs, fn in parts:
                hin = [self._to_host(t) for t in ins]
                hout = []
                for o in outs:
                    alias = next((h for t, h in zip(ins, hin) if t is o), None)
                    hout.append(alias if alias is not None else
                                torch.empty(o.shape, dtype=o.dtype, pin_memory=True))
                host.append((hin, hout, outs, fn))
            staged.record(s)
            _stream_wait_value(s, self._flag.data_ptr(), seq & 0x7FFFFFFF)
            for hin, hout, outs, fn in host:
                for o, h in zip(outs, hout):
                    o.copy_(h, non_blocking=True)
        end.record(s)  # seen by the capture: the collective ends here
        future = torch.futures.Future(devices=[caller.device])
        with torch.cuda.stream(s):
            future.set_result([o for ins, outs, _ in parts for o in outs])
        keep = None
        if self._avoid_record_streams:
            keep = tensors
        else:
            for t in cuda:
                _hooks.record_stream_for_backend(t, s)

        def run():
            for hin, hout, outs, fn in host:
                fn(hin, hout)

        job = _Job(run, staged, seq, what, site, host)
        self._queue.put(job)
        return _Work(self, end, future, job, host_blocking, keep)

    def _launch_host(self, what, parts):
        """CPU tensors: gloo on them directly, blocking, as gloo's own CPU collectives are."""
        for ins, outs, fn in parts:
            fn(list(ins), list(outs))
        return _Work(self, None, _done_future([o for _, outs, _ in parts for o in outs]), None,
                     False, None)

    @staticmethod
    def _to_host(t):
        h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        h.copy_(t, non_blocking=True)
        return h

    # -- gloo on the host copies -----------------------------------------------------------
    def _allreduce_host(self, tensors, op):
        key = _reduce_key(op)
        if key == "PREMUL_SUM":
            f = _premul_factor(op)
            for t in tensors:
                t.mul_(f)
            key = "SUM"
        gop = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.SUM,
               "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
               "MAX": dist.ReduceOp.MAX, "BAND": dist.ReduceOp.BAND, "BOR": dist.ReduceOp.BOR,
               "BXOR": dist.ReduceOp.BXOR}.get(key)
        if gop is None:
            raise BackendError("shardcheck one-GPU backend: reduce op %s" % key)
        o = dist.AllreduceOptions()
        o.reduceOp = gop
        self._gloo.allreduce(tensors, o).wait()
        if key == "AVG":
            for t in tensors:
                if t.is_floating_point():
                    t.div_(self._size)
                else:
                    t.floor_divide_(self._size)

    # -- the c10d methods --------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def fn(hin, hout):
            self._allreduce_host(hin, op)
        return self._issue("allreduce", tensors, tensors, fn)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def fn(hin, hout):
            o = dist.BroadcastOptions()
            o.rootRank = root
            self._gloo.broadcast(hin, o).wait()
        return self._issue("broadcast", tensors, tensors, fn)

    def reduce(self, tensors, opts=None):
        root, op = opts.rootRank, opts.reduceOp

        def fn(hin, hout):
            copies = [h.clone() for h in hin]
            self._allreduce_host(copies, op)
            if self._rank == root:
                for h, c in zip(hin, copies):
                    h.copy_(c)
        return self._issue("reduce", tensors, tensors, fn)

    def allgather(self, output_lists, input_tensors, opts=None):
        outs = [t for lst in output_lists for t in lst]
        n = len(input_tensors)

        def fn(hin, hout):
            lists = [hout[i * self._size:(i + 1) * self._size] for i in range(n)]
            self._gloo.allgather(lists, hin).wait()
        return self._issue("allgather", input_tensors, outs, fn)

    def _allgather_base(self, output, input, opts=None):
        def fn(hin, hout):
            chunks = list(hout[0].view(-1).chunk(self._size))
            self._gloo.allgather([chunks], [hin[0].reshape(-1)]).wait()
        return self._issue("_allgather_base", [input], [output], fn)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        def fn(hin, hout):
            for i, o in zip(hin, hout):
                chunks = list(o.view(-1).chunk(self._size))
                self._gloo.allgather([chunks], [i.reshape(-1)]).wait()
        return self._issue("allgather_into_tensor_coalesced", inputs, outputs, fn)

    def _reduce_scatter_host(self, full, out, op):
        self._allreduce_host([full], op)
        out.copy_(full.view(-1).chunk(self._size)[self._rank].view(out.shape))

    def _reduce_scatter_base(self, output, input, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def fn(hin, hout):
            self._reduce_scatter_host(hin[0], hout[0], op)
        return self._issue("_reduce_scatter_base", [input], [output], fn)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def fn(hin, hout):
            for i, o in zip(hin, hout):
                self._reduce_scatter_host(i, o, op)
        return self._issue("reduce_scatter_tensor_coalesced", inputs, outputs, fn)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        ins = [t for lst in input_lists for t in lst]
        n = len(outputs)

        def fn(hin, hout):
            for k in range(n):
                parts = hin[k * self._size:(k + 1) * self._size]
                full = torch.cat([p.reshape(-1) for p in parts])
                self._allreduce_host([full], op)
                hout[k].copy_(full.split([p.numel() for p in parts])[self._rank]
                              .view(hout[k].shape))
        return self._issue("reduce_scatter", ins, outputs, fn)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        outs, ins = list(output_split_sizes or []), list(input_split_sizes or [])

        def fn(hin, hout):
            self._gloo.alltoall_base(hout[0], hin[0], outs, ins, dist.AllToAllOptions()).wait()
        return self._issue("alltoall_base", [input], [output], fn)

    def alltoall(self, outputs, inputs, opts=None):
        n = len(inputs)

        def fn(hin, hout):
            send = torch.cat([t.reshape(-1) for t in hin])
            recv = torch.empty(sum(t.numel() for t in hout), dtype=send.dtype)
            self._gloo.alltoall_base(recv, send, [t.numel() for t in hout],
                                     [t.numel() for t in hin], dist.AllToAllOptions()).wait()
            for t, piece in zip(hout, recv.split([t.numel() for t in hout])):
                t.copy_(piece.view(t.shape))
        assert n == self._size
        return self._issue("alltoall", inputs, outputs, fn)

    def barrier(self, opts=None):
        dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
        with _hooks.quiet():
            t = torch.zeros(1, device=dev)
        work = self._issue("barrier", [t], [t], lambda hin, hout: self._gloo.barrier().wait(),
                           host_blocking=True)
        return work

    def send(self, tensors, dst, tag=0):
        def fn(hin, hout):
            # Posted, not waited for: two ranks that send to each other before receiving
            # would otherwise wait on each other (NCCL's own deadlock only past its buffers).
            # The worker waits for it before any job that is not a send.
            for h in hin:
                self._sends.append((self._gloo.send([h], dst, tag), h))
        fn.peer, fn.tag = dst, tag  # for a coalesced batch, which posts them all at once
        return self._issue("send", tensors, [], fn)

    def recv(self, tensors, src, tag=0):
        def fn(hin, hout):
            for h in hout:
                self._gloo.recv([h], src, tag).wait()
        fn.peer, fn.tag = src, tag
        return self._issue("recv", [], tensors, fn)

    def gather(self, outputs, inputs, opts=None):
        root = opts.rootRank
        outs = [t for lst in outputs for t in lst]

        def fn(hin, hout):
            lists = [hout] if self._rank == root else []
            o = dist.GatherOptions()
            o.rootRank = root
            self._gloo.gather(lists, hin, o).wait()
        return self._issue("gather", inputs, outs, fn)

    def scatter(self, outputs, inputs, opts=None):
        root = opts.rootRank
        ins = [t for lst in inputs for t in lst]

        def fn(hin, hout):
            o = dist.ScatterOptions()
            o.rootRank = root
            self._gloo.scatter(hout, [hin] if self._rank == root else [], o).wait()
        return self._issue("scatter", ins, outputs, fn)

    # -- coalescing: one job, one end event --------------------------------------------------
    def start_coalescing(self, device):
        self._coalescing = []

    def end_coalescing(self, device):
        parts, self._coalescing = self._coalescing or [], None
        if not parts:
            return _Work(self, None, _done_future([]), None, False, None)
        p2p = [p for p in parts if p[0] in ("send", "recv")]
        if p2p:
            return self._launch("coalesced", [self._batched_p2p(parts)], False)
        return self._launch("coalesced", [(i, o, f) for _, i, o, f in parts], False)

    def _batched_p2p(self, parts):
        """batch_isend_irecv: every send and receive posted at once, then waited for, so two
        ranks that send to each other first do not wait on each other."""
        ins = [t for _, i, _, _ in parts for t in i]
        outs = [t for _, _, o, _ in parts for t in o]
        spans = [(what, len(i), len(o), f) for what, i, o, f in parts]

        def fn(hin, hout):
            works = []
            a = b = 0
            for what, ni, no, f in spans:
                for h in hin[a:a + ni]:
                    works.append(self._gloo.send([h], f.peer, f.tag))
                for h in hout[b:b + no]:
                    works.append(self._gloo.recv([h], f.peer, f.tag))
                a, b = a + ni, b + no
            for w in works:
                w.wait()
        return ins, outs, fn


# What ends a rank whose collective failed on the worker: the capture sets it (to end the
# rank file marked partial, at the collective's line); alone, the rank prints why and exits 1.
on_fatal = None


def _fatal(job):
    """A collective that failed among the processes cannot be finished, and its outputs on the
    GPU would be left as they were: end the rank, as ProcessGroupNCCL's watchdog does under
    TORCH_NCCL_ASYNC_ERROR_HANDLING (its default)."""
    if on_fatal is not None:
        on_fatal(job.error, job.site)
    import sys
    print("shardcheck one-GPU backend: %s (issued at %s:%d); ending this rank, as NCCL's "
          "watchdog does" % (job.error, job.site[0], job.site[1]), file=sys.stderr, flush=True)
    os._exit(1)


def _done_future(value):
    f = torch.futures.Future()
    f.set_result(value)
    return f


def _create(store, rank, size, timeout):
    return OneGpuGroup(store, rank, size, timeout)


_installed = False
_patched = []


def _nccl_to_ours(backend):
    if backend is None:
        return "cpu:gloo,cuda:" + NAME
    text = str(backend)
    if text.lower() == "nccl":
        return NAME
    if "nccl" in text.lower():
        return ",".join(p.replace("nccl", NAME) for p in text.split(","))
    return backend


def install():
    """Registers the backend and routes "nccl" (and the default backend) to it, and device
    indices past the GPUs onto them. Idempotent."""
    global _installed
    if _installed:
        return
    if NAME not in getattr(dist.Backend, "backend_list", []) and \
            not hasattr(dist.Backend, NAME.upper()):
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    c10d = dist.distributed_c10d

    def patch(obj, name, make):
        orig = getattr(obj, name)
        setattr(obj, name, make(orig))
        _patched.append((obj, name, orig))

    def init_pg(orig):
        def init_process_group(backend=None, *args, **kwargs):
            ours = _nccl_to_ours(backend)
            if ours != backend and kwargs.get("device_id") is not None:
                # NCCL's eager start-up on that device; this backend has no communicator to
                # start: bind the device as the caller asked and go on lazily.
                torch.cuda.set_device(kwargs.pop("device_id"))
            return orig(ours, *args, **kwargs)
        return init_process_group

    def new_group(orig):
        def new_group_(*args, **kwargs):
            if "backend" in kwargs:
                kwargs["backend"] = _nccl_to_ours(kwargs["backend"]) \
                    if kwargs["backend"] is not None else None
            elif len(args) >= 3:
                args = list(args)
                args[2] = _nccl_to_ours(args[2]) if args[2] is not None else None
            return orig(*args, **kwargs)
        return new_group_

    patch(dist, "init_process_group", init_pg)
    if c10d.init_process_group is not dist.init_process_group:
        patch(c10d, "init_process_group", init_pg)
    patch(dist, "new_group", new_group)
    if c10d.new_group is not dist.new_group:
        patch(c10d, "new_group", new_group)
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        _hooks.remap_devices(lambda d: _onto(d, count))

        def exchange(orig):
            def exchange_(device):
                return orig(device % count if isinstance(device, int) and device >= 0 else device)
            return exchange_
        for name in ("_exchange_device", "_maybe_exchange_device"):
            if hasattr(torch.cuda, name):
                patch(torch.cuda, name, exchange)

        def set_device(orig):
            def set_device_(device):
                return orig(_onto(device, count))
            return set_device_
        patch(torch.cuda, "set_device", set_device)
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
    for obj, name, orig in reversed(_patched):
        setattr(obj, name, orig)
    _patched.clear()
    _installed = False
