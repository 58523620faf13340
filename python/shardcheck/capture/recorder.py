"""Turns what torch reports (operators, allocator and stream callbacks, collectives) into the
records of docs/capture-format.md, in issue order.

The Recorder knows nothing of torch: it is driven by plain calls (pointers, stream handles,
sites), so its bookkeeping is tested without a GPU. ``hooks.py`` feeds it from a real program.
"""

import collections
import os
import threading
import weakref

from .writer import Writer, quoted


def _spans(x):
    """A collective's side as a list of spans: [] for None, [span] for one."""
    if x is None:
        return []
    return list(x) if isinstance(x, list) else [x]


def _ranges_json(ranges):
    return "[" + ",".join("[%d,%d,%d]" % (b, o, n) for b, o, n in ranges) + "]"


def _scale_json(scale):
    """An op record's optional `scale` field: a finite number other than 0, or nothing."""
    if scale is None or scale != scale or scale in (0.0, float("inf"), float("-inf")):
        return ""
    return ',"scale":%r' % float(scale)


class _Switching:
    """The writer, with the recorder's thread switch before every record."""

    def __init__(self, writer, switch):
        self._writer = writer
        self._switch = switch

    def write(self, record):
        if not self._writer.closed:
            self._switch()
            self._writer.write(record)

    def write_line(self, text):
        if not self._writer.closed:
            self._switch()
            self._writer.write_line(text)

    def __getattr__(self, name):
        return getattr(self._writer, name)


_recorders = weakref.WeakSet()  # this process's recorders


def _forked_child():
    """A process forked from a rank records nothing (docs/capture.md): each recorder's writer is
    orphaned, and its lock, which a thread of the parent may have held at the fork, is a free
    one in the child, where that thread does not exist."""
    for r in list(_recorders):
        r._lock = threading.RLock()
        r._w.orphan()


os.register_at_fork(after_in_child=_forked_child)


class Recorder:
    def __init__(self, path, header, default_stream=0, sees_frees=True, addresses=None,
                 storages=None):
        """sees_frees: the allocator reports every free (CUDA's caching allocator does; CPU
        tensors have no such callbacks, so a CPU address seen again may be a new storage).
        addresses: alloc records carry the device address (default: sees_frees).
        storages: without frees, weak references to the storages (hooks.StorageRefs): a
        storage found freed is recorded freed there, before the next operator."""
        self._sees_frees = sees_frees
        self._storages = None if sees_frees else storages
        self._weak = {}  # buf -> (weak reference to its storage, its pointer)
        self._unpolled = collections.deque()  # bufs with a weak reference, the next to poll first
        self._addresses = sees_frees if addresses is None else addresses
        self._w = Writer(path, header)
        self._lock = threading.RLock()
        _recorders.add(self)
        self._sites = {}  # (file, line, func) -> id
        self._streams = {}  # handle -> id
        self._stream_names = set()
        self._groups = {}  # key -> id
        self._events = {}  # handle -> id
        self._next_event = 0
        self._live = {}  # pointer -> (buf id, bytes)
        self._pending = {}  # pointer -> (stream handle, site): allocated, bytes not yet known
        self._next_buf = 0
        self._names = {}  # operator name -> its JSON string
        self.stream_names = {}  # handle -> a name to give the stream when first seen
        self._coll_streams = {}
        self._buf_site = {}  # buf -> the site of its allocation
        self._site_text = {}  # site id -> "file:line"
        # Where each buffer was made, for the collectives that carry it (docs/capture-format.md,
        # `from`): buf -> (its allocation's site, n) for the n-th buffer allocated at that line,
        # or the name of the parameter a buffer that existed before is (param_name).
        self._line_count = {}  # "file:line" -> buffers allocated there so far
        self._buf_origin = {}  # buf -> (site, n, "file:line"), or a parameter's name, or None
        # The parameter whose storage is at a pointer, or None (set by hooks.py).
        self.param_name = lambda ptr: None
        self.stats = {"ops": 0, "allocs": 0, "frees": 0, "collectives": 0, "unseen_allocs": 0,
                      "values": 0}
        self._colls = 0  # coll records written: a value record names one by its index
        # CUDA graphs: while one is captured, its kernels are kept (name, reads, writes), not
        # written; each replay writes them on the replay's stream at the replay's line.
        self._capturing = None
        self._capture_stream = 0
        self._graphs = {}  # key -> (the capture's stream, [kernel or event entry, ...])
        # Host threads (docs/capture-format.md, "Host threads"): the program's own is thread 0;
        # every other thread that writes a record gets the next id, and a `thread` record says
        # which thread issued the records after it. thread_of (set by hooks.py) tells the
        # calling thread: None for the program's own, else (key, name, start) with start the
        # (signal, site) its starting thread left, or None.
        self.thread_of = lambda: None
        self._threads = {}  # key -> id
        self._thread = 0
        self._next_signal = 0
        self._raw = self._w
        self._w = _Switching(self._raw, self._switch)
        # A backend's worker (gloo's, for CUDA tensors) records an event where its work is
        # done; the program's thread that waits for it (work.wait()) has waited for the worker.
        self._event_signal = {}  # event handle -> the signal its worker left at its record
        # Point to point: batches waiting to be joined back (stream handle -> {lane: join event}),
        # and the requests made so far (each one's end event is its own).
        self._joins = {}
        self._requests = 0
        self._written_name = {}  # stream id -> its name in the file
        self.stream(default_stream, "default")

    # -- definitions ---------------------------------------------------------------------
    def site(self, file, line, func):
        key = (file, line, func)
        sid = self._sites.get(key)
        if sid is None:
            sid = len(self._sites)
            self._sites[key] = sid
            self._w.write({"k": "site", "id": sid, "file": file, "line": line, "func": func})
            self._site_text[sid] = "%s:%d" % (file, line)
        return sid

    def stream(self, handle, name=None):
        sid = self._streams.get(handle)
        if sid is None:
            sid = len(self._streams)
            base = name or self.stream_names.get(handle) or "stream %d" % sid
            unique, n = base, 2
            while unique in self._stream_names:
                unique, n = "%s #%d" % (base, n), n + 1
            self._stream_names.add(unique)
            self._streams[handle] = sid
            self._written_name[sid] = unique
            self._w.write({"k": "stream", "id": sid, "name": unique})
        return sid

    def has_stream(self, handle):
        return handle in self._streams

    def group(self, key, name, ranks):
        gid = self._groups.get(key)
        if gid is None:
            gid = len(self._groups)
            self._groups[key] = gid
            self._w.write({"k": "group", "id": gid, "name": name, "ranks": sorted(ranks)})
        return gid

    def event(self, handle):
        eid = self._events.get(handle)
        if eid is None:
            eid = self._next_event
            self._next_event += 1
            self._events[handle] = eid
        return eid

    # -- memory --------------------------------------------------------------------------
    def on_alloc(self, ptr, stream_handle, site):
        with self._lock:
            self._pending[ptr] = (stream_handle, site)

    def on_free(self, ptr, site, background=False):
        """background: freed by a thread that does so only once the collectives that used the
        buffer have finished (a process group's watchdog): the host has, in effect, waited
        for their streams."""
        with self._lock:
            if self._pending.pop(ptr, None) is not None:
                self.stats["unseen_allocs"] += 1
                return
            live = self._live.pop(ptr, None)
            if live is None:
                return  # allocated before the capture and never used in it
            self._free(live[0], site, background)

    def _free(self, buf, site, collectives_done=True):
        """The free of lifetime ``buf`` at ``site``. collectives_done: whatever freed it did so
        only once the collectives that used it had finished (a process group's watchdog, a
        storage found freed without a callback): the host has, in effect, waited for their
        streams first."""
        streams = self._coll_streams.pop(buf, ())
        if collectives_done:
            for sid in sorted(streams):
                self._w.write({"k": "stream_sync", "stream": sid, "at": site})
        self._w.write({"k": "free", "buf": buf, "at": site})
        self.stats["frees"] += 1

    def buffer(self, ptr, nbytes, end=0, stream_handle=None, site=None):
        """The lifetime holding the storage at ``ptr``: emits its allocation on first use.
        nbytes: the storage's size, or a function that gives it (asked only for a new one);
        end: the end of the range about to be used, which the storage holds; stream_handle and
        site: where that use is (for a lifetime that has to be renewed, below)."""
        live = self._live.get(ptr)
        if live is not None:
            if end <= live[1]:
                return live[0]
            return self._outgrown(ptr, live, nbytes, end, stream_handle, site)
        size = nbytes
        nbytes = max(nbytes() if callable(nbytes) else nbytes, end)
        buf = self._next_buf
        self._next_buf += 1
        pending = self._pending.pop(ptr, None)
        if pending is not None:
            stream_handle, site = pending
            rec = {"k": "alloc", "buf": buf, "bytes": nbytes, "stream": self.stream(stream_handle),
                   "at": site}
            self._count_at(buf, site)
        else:
            rec = {"k": "alloc", "buf": buf, "bytes": nbytes, "stream": 0, "at": self._pre_site(),
                   "pre": True}
        if self._addresses:
            rec["addr"] = ptr  # the caching allocator's block: where reuse really happened
        self._w.write(rec)
        self.stats["allocs"] += 1
        self._live[ptr] = (buf, nbytes)
        self._buf_site[buf] = rec["at"]
        self._watch(buf, ptr, size)
        return buf

    def _outgrown(self, ptr, live, nbytes, end, stream_handle, site):
        """A use past the end of the lifetime at ``ptr``: the file's allocation is too small, so
        the lifetime ends and a larger one begins at the same address. With every free seen
        (CUDA), the storage itself grew within its block (``resize_``, an ``out=`` argument):
        the new lifetime holds the old bytes, as a resize that moves the storage copies them.
        Without frees (CPU, cudaMallocAsync), the old storage was freed unseen and a new one
        took its address: nothing carries over, and the old one's free comes first (so the new
        lifetime can be placed at the address it shares with it)."""
        old, old_bytes = live
        self._forget(old)
        at = site if site is not None else self._pre_site()
        stream = self.stream(stream_handle) if stream_handle is not None else 0
        size = nbytes
        nbytes = max(nbytes() if callable(nbytes) else nbytes, end)
        buf = self._next_buf
        self._next_buf += 1

        if not self._sees_frees:
            self._free(old, at)
        rec = {"k": "alloc", "buf": buf, "bytes": nbytes, "stream": stream, "at": at}
        if self._addresses:
            rec["addr"] = ptr
        self._w.write(rec)
        if self._sees_frees:
            self._w.write_line('{"k":"op","name":"aten::resize_","stream":%d,"r":%s,"w":%s,"at":%d}'
                               % (stream, _ranges_json([(old, 0, old_bytes)]),
                                  _ranges_json([(buf, 0, old_bytes)]), at))
            self.stats["ops"] += 1
            self._free(old, at)
        self.stats["allocs"] += 1
        self._live[ptr] = (buf, nbytes)
        self._buf_site[buf] = self._buf_site.get(old, at) if self._sees_frees else at
        # The same tensor grown where it was; or (without frees) a storage made where the
        # capture did not see it, whose origin is not known.
        self._buf_origin[buf] = self._buf_origin.get(old) if self._sees_frees else None
        self._watch(buf, ptr, size)
        return buf

    def _count_at(self, buf, site):
        """buf is the next buffer allocated at site's line."""
        text = self._site_text.get(site)
        if text is None or text.startswith("<"):
            return
        n = self._line_count.get(text, 0)
        self._line_count[text] = n + 1
        self._buf_origin[buf] = (site, n, text)

    def _origin(self, buf, ptr):
        """The fields that say where buffer buf (at ptr) was made: `from` [site, n, of] for one
        allocated in the capture, `param` for a parameter that existed before it; {} when the
        recorder does not know."""
        if buf not in self._buf_origin:
            self._buf_origin[buf] = self.param_name(ptr)  # asked once per buffer
        o = self._buf_origin[buf]
        if o is None:
            return {}
        if isinstance(o, str):
            return {"param": o}
        site, n, text = o
        return {"from": [site, n, self._line_count[text]]}

    def _renewed(self, ptr, site):
        """Without frees (CPU): the storage at ptr may have been freed since its lifetime was seen
        and a new one made there where the capture did not see it; that lifetime ends here, so
        the new one is not taken for the old (its origin is not known)."""
        live = self._live.get(ptr)
        if live is None or self._storages is None:
            return
        entry = self._weak.get(live[0])
        if entry is None or not self._storages.expired(entry[0]):
            return
        self._forget(live[0])
        del self._live[ptr]
        self._free(live[0], site)

    def touch(self, spans, stream_handle, site):
        """Storages an operator made: their allocation, on the stream it ran on. Without frees
        (CPU), a storage made at the address of a live lifetime is a new one there: the old was
        freed unseen."""
        with self._lock:
            self.poll_frees(site, 16)
            for ptr, nbytes, off, length in spans:
                if not self._sees_frees and ptr in self._live:
                    old = self._live.pop(ptr)[0]
                    self._forget(old)
                    self._free(old, site)
                if ptr not in self._live and ptr not in self._pending:
                    self._pending[ptr] = (stream_handle, site)
                self.buffer(ptr, nbytes, off + length, stream_handle, site)

    def _pre_site(self):
        return self.site("<before capture>", 0, "")

    def ranges(self, spans, stream_handle=None, site=None):
        """spans: (storage ptr, storage bytes, offset, length) -> [[buf, offset, length]]."""
        out = []
        for ptr, nbytes, off, length in spans:
            if length <= 0 or ptr == 0:
                continue
            out.append([self.buffer(ptr, nbytes, off + length, stream_handle, site), off, length])
        return out

    # -- frees without callbacks (CPU, cudaMallocAsync): the storages' weak references -----
    def _watch(self, buf, ptr, size):
        weak = getattr(size, "weak", None)
        if self._storages is None or weak is None:
            return
        try:
            ref = weak()
        except RuntimeError:
            return
        self._weak[buf] = (ref, ptr)
        self._unpolled.append(buf)

    def _forget(self, buf):
        entry = self._weak.pop(buf, None)
        if entry is not None:
            self._storages.release(entry[0])

    def poll_frees(self, site, most=None):
        """Records the free of each watched storage found freed: `most` of them looked at, the
        longest unlooked-at first (every one when None), so a free reaches the file within a
        few operators of where the program dropped the storage, at the line about to run."""
        if self._storages is None or not self._unpolled:
            return
        n = len(self._unpolled) if most is None else min(most, len(self._unpolled))
        for _ in range(n):
            buf = self._unpolled.popleft()
            entry = self._weak.get(buf)
            if entry is None:
                continue  # forgotten: freed already, or outgrown
            ref, ptr = entry
            if not self._storages.expired(ref):
                self._unpolled.append(buf)
                continue
            self._forget(buf)
            live = self._live.get(ptr)
            if live is None or live[0] != buf:
                continue
            del self._live[ptr]
            self._free(buf, site)

    # -- stream work ---------------------------------------------------------------------
    def op(self, name, stream_handle, reads, writes, site, scale=None):
        """scale: the number the operator multiplies its one tensor operand by (docs/capture-
        format.md), where it is known."""
        with self._lock:
            self.poll_frees(site, 16)
            # Each storage's lifetime first reaches the furthest byte the operator touches, so
            # its reads and writes name one lifetime.
            self.ranges(sorted(list(reads) + list(writes), key=lambda sp: sp[2] + sp[3],
                               reverse=True), stream_handle, site)
            r = self.ranges(reads, stream_handle, site)
            w = self.ranges(writes, stream_handle, site)
            if not r and not w:
                return
            if self._capturing is not None:
                self._capturing.append(("op", stream_handle, name, r, w, scale))
                return
            if self._joins:
                self._join_batch(stream_handle, site)
            # The hottest record: formatted by hand (its name through quoted(), as the loader
            # takes it).
            self._w.write_line('{"k":"op","name":%s,"stream":%d,"r":%s,"w":%s,"at":%d%s}' % (
                self._op_name(name), self.stream(stream_handle), _ranges_json(r),
                _ranges_json(w), site, _scale_json(scale)))
            self.stats["ops"] += 1

    def _op_name(self, name):
        text = self._names.get(name)
        if text is None:
            text = self._names[name] = quoted(name)
        return text

    # -- CUDA graphs ---------------------------------------------------------------------
    def graph_begin(self, stream_handle=0):
        """A CUDA graph's capture begins on ``stream_handle``: the kernels issued until
        graph_end run only when the graph is replayed. The memory the capture allocates is
        allocated now (the graph's private pool keeps it); the event records and waits inside
        the capture are its internal order (a fork to a side stream and the join back) and are
        kept with the kernels; record_stream inside it is not written."""
        with self._lock:
            self._capturing = []
            self._capture_stream = stream_handle

    def graph_end(self, key):
        with self._lock:
            if self._capturing is not None:
                self._graphs[key] = (self._capture_stream, self._capturing)
            self._capturing = None

    def capturing(self):
        return self._capturing is not None

    def graph_replay(self, key, stream_handle, site):
        """g.replay(): the captured kernels, in capture order, at the replay's line: those of
        the capture's stream on the replay's stream, those of a side stream on a stream of the
        graph's own (named for the graph and that stream), ordered by the captured events.
        Buffers freed since (the capture's temporaries, back in the graph's pool) are the
        graph's own memory: what it reads and writes there is left out."""
        with self._lock:
            graph = self._graphs.get(key)
            if not graph:
                return
            origin, entries = graph
            live = {b for b, _ in self._live.values()}
            text = self._site_text.get(site, "?")

            def stream(handle):
                if handle == origin:
                    return self.stream(stream_handle)
                return self.stream(("graph", key, handle), "%s of the graph replayed at %s" % (
                    self._stream_label(handle), text))

            for entry in entries:
                if entry[0] == "op":
                    _, handle, name, r, w, scale = entry
                    r = [x for x in r if x[0] in live]
                    w = [x for x in w if x[0] in live]
                    if r or w:
                        self._w.write_line('{"k":"op","name":%s,"stream":%d,"r":%s,"w":%s,"at":%d%s}'
                                           % (self._op_name(name), stream(handle), _ranges_json(r),
                                              _ranges_json(w), site, _scale_json(scale)))
                        self.stats["ops"] += 1
                else:
                    kind, ev, handle = entry
                    self._w.write({"k": kind, "event": self.event(("graph", key, ev)),
                                   "stream": stream(handle), "at": site})

    def _stream_label(self, handle):
        """How the program knows a stream: the name it got where it was made, else its id."""
        return self.stream_names.get(handle) or "stream %#x" % handle

    def graph_reset(self, key):
        with self._lock:
            self._graphs.pop(key, None)

    def record_stream(self, ptr, nbytes, stream_handle, site):
        with self._lock:
            if ptr == 0 or self._capturing is not None:
                return
            buf = self.buffer(ptr, nbytes)
            self._w.write({"k": "record_stream", "buf": buf, "stream": self.stream(stream_handle),
                           "at": site})

    def event_created(self, handle):
        with self._lock:
            self._events.pop(handle, None)
            self.event(handle)

    def event_deleted(self, handle):
        with self._lock:
            self._events.pop(handle, None)

    def event_record(self, handle, stream_handle, site, worker=False):
        """worker: recorded by a backend's worker thread (its work done when it completes)."""
        with self._lock:
            if self._capturing is not None:
                self._capturing.append(("event_record", handle, stream_handle))
                return
            self._join_batch(stream_handle, site)
            self._w.write({"k": "event_record", "event": self.event(handle),
                           "stream": self.stream(stream_handle), "at": site})
            if worker:
                self._event_signal[handle] = self.signal(site)
            else:
                self._event_signal.pop(handle, None)

    def event_wait(self, handle, stream_handle, site, worker=False):
        """worker: issued by a backend's worker thread. Any other thread that makes a stream
        wait for a worker's event is inside that work's wait(): it has waited for the worker."""
        with self._lock:
            if self._capturing is not None:
                self._capturing.append(("event_wait", handle, stream_handle))
                return
            if not worker:
                self.wait_signal(self._event_signal.get(handle), site)
            self._w.write({"k": "event_wait", "event": self.event(handle),
                           "stream": self.stream(stream_handle), "at": site})

    def event_sync(self, handle, site):
        with self._lock:
            self.poll_frees(site)
            self._w.write({"k": "event_sync", "event": self.event(handle), "at": site})
            self._w.flush()  # a rank that hangs or dies here keeps it

    def stream_sync(self, stream_handle, site):
        with self._lock:
            self.poll_frees(site)
            self._join_batch(stream_handle, site)
            self._w.write({"k": "stream_sync", "stream": self.stream(stream_handle), "at": site})
            self._w.flush()  # a rank that hangs or dies here keeps it

    def device_sync(self, site):
        with self._lock:
            self.poll_frees(site)
            for handle in list(self._joins):
                self._join_batch(handle, site)
            self._w.write({"k": "device_sync", "at": site})
            self._w.flush()  # a rank that hangs or dies here keeps it

    def collective(self, op, group_id, stream_handle, inp, out, dtype, count, reduce, root, name,
                   site):
        """inp/out: one span each (see ranges), or for the side a list form passes as a list
        (all_gather's outputs, reduce_scatter's inputs) a list of spans, one per member; None
        for a barrier."""
        with self._lock:
            ins, outs = _spans(inp), _spans(out)
            if op != "barrier" and (not ins or not outs or any(sp is None or sp[3] <= 0
                                                               for sp in ins + outs)):
                return
            self.poll_frees(site)
            if self._capturing is not None:  # captured into a graph: its kernels run at replay
                if op != "barrier":
                    self.op("c10d::" + op, stream_handle, ins, outs, site)
                return None
            self._join_batch(stream_handle, site)
            rec = {"k": "coll", "op": op, "group": group_id, "stream": self.stream(stream_handle)}
            if op != "barrier":
                if not self._sees_frees:
                    for sp in ins:
                        self._renewed(sp[0], site)
                self.ranges(sorted(ins + outs, key=lambda sp: sp[2] + sp[3], reverse=True),
                            stream_handle, site)
                r_in, r_out = self.ranges(ins), self.ranges(outs)
                rec["in"] = r_in if isinstance(inp, list) else r_in[0]
                rec["out"] = r_out if isinstance(out, list) else r_out[0]
                for r in r_in + r_out:
                    self._coll_streams.setdefault(r[0], set()).add(rec["stream"])
                if op != "broadcast":
                    # Ranks that reduce different tensors at one position of a group (equal
                    # shapes, swapped order) are told apart by where each tensor was made: the
                    # checker compares these fields across the ranks. A broadcast's receivers
                    # make their tensors where its root does not (broadcast_object_list).
                    one = r_in if len(r_in) == 1 else r_out if len(r_out) == 1 else []
                    if one:
                        rec.update(self._origin(one[0][0], (ins if one is r_in else outs)[0][0]))
            rec.update({"dtype": dtype, "count": count, "reduce": reduce, "root": root,
                        "name": name, "at": site})
            self._w.write(rec)
            self.stats["collectives"] += 1
            self._colls += 1
            self._w.flush()  # a rank that hangs or dies here keeps it
            return self._colls - 1

    def range_of(self, span):
        """[buf, offset, bytes] of a span (see ranges) as the file knows it now, or None."""
        with self._lock:
            ranges = self.ranges([span])
            return ranges[0] if ranges else None

    def records_so_far(self):
        """The records the file holds now: where a value taken now stands (its `taken`)."""
        with self._lock:
            return self._w.records

    def value(self, rec):
        """A `value` record (values.py): what a tensor held at a point of the program."""
        with self._lock:
            self._w.write(rec)
            self.stats["values"] += 1

    # -- point to point (docs/capture-format.md, "Point to point") ---------------------------
    def p2p(self, kind, peer, group_id, stream_handle, span, dtype, count, tag, name, site,
            batch=False):
        """A send or recv on the stream it runs on (NCCL's pair stream, or the one-GPU
        backend's). batch: one of a batch_isend_irecv, whose transfers progress together (one
        NCCL group call): it runs on a stream of its own per peer and direction, forked from
        ``stream_handle`` here and joined back before the next work on it (join_batch)."""
        with self._lock:
            self.poll_frees(site)
            if self._capturing is not None:
                self.op("c10d::" + kind, stream_handle, [span] if kind == "send" else [],
                        [span] if kind == "recv" else [], site)
                return
            if not batch:
                self._join_batch(stream_handle, site)
                self._write_p2p(kind, peer, group_id, stream_handle, span, dtype, count, tag, name,
                                site)
                return
            lane = ("batch", stream_handle, group_id, peer, kind)
            self.stream(lane, "%s, batch %s %d" % (self._written_name[self.stream(stream_handle)],
                                                   "send to" if kind == "send" else "recv from",
                                                   peer))
            self._write_event("event_record", ("fork",) + lane, stream_handle, site)
            self._write_event("event_wait", ("fork",) + lane, lane, site)
            self._write_p2p(kind, peer, group_id, lane, span, dtype, count, tag, name, site)
            self._write_event("event_record", ("join",) + lane, lane, site)
            self._joins.setdefault(stream_handle, {})[lane] = ("join",) + lane

    def join_batch(self, stream_handle, site):
        """The end of a batch issued on ``stream_handle``: its stream waits for every transfer."""
        with self._lock:
            self._join_batch(stream_handle, site)

    def _join_batch(self, stream_handle, site):
        for join in self._joins.pop(stream_handle, {}).values():
            self._write_event("event_wait", join, stream_handle, site)

    def p2p_request(self, kind, peer, group_id, span, dtype, count, tag, name, site, label,
                    caller=0):
        """A request that progresses on its own once posted, until its wait (gloo's isend and
        irecv, and the send and recv that wait for them at once): on a stream of its own per
        group, peer and direction (``label`` names it), after an event of the caller's stream,
        with an end event; returns that event's handle, which the request's wait syncs with
        (event_sync)."""
        with self._lock:
            self.poll_frees(site)
            lane = ("request", group_id, peer, kind)
            self.stream(lane, label)
            self._write_event("event_record", ("start",) + lane, caller, site)
            self._write_event("event_wait", ("start",) + lane, lane, site)
            self._write_p2p(kind, peer, group_id, lane, span, dtype, count, tag, name, site)
            end = ("request end", self._requests)
            self._requests += 1
            self._write_event("event_record", end, lane, site)
            self._w.flush()  # a rank that hangs or dies here keeps it
            return end

    def _write_event(self, kind, handle, stream_handle, site):
        self._w.write({"k": kind, "event": self.event(handle), "stream": self.stream(stream_handle),
                       "at": site})

    def _write_p2p(self, kind, peer, group_id, stream_handle, span, dtype, count, tag, name, site):
        buf = self.ranges([span])[0]
        stream = self.stream(stream_handle)
        self._w.write({"k": kind, "peer": peer, "group": group_id, "stream": stream, "buf": buf,
                       "dtype": dtype, "count": count, "tag": tag, "name": name, "at": site})
        # Freed once the transfer is done (the Work holds the tensor until then): the free
        # waits for its stream, as a collective's does.
        self._coll_streams.setdefault(buf[0], set()).add(stream)
        self.stats["collectives"] += 1
        self._w.flush()  # a rank that hangs or dies here keeps it

    # -- host threads ------------------------------------------------------------------
    def _switch(self):
        """Before each record: a `thread` record where the calling thread is not the one that
        wrote the last (a new thread's first also waits for its start)."""
        t = self.thread_of()
        if t is None:
            tid = 0
        else:
            key, name, start = t
            tid = self._threads.get(key)
            if tid is None:
                tid = self._threads[key] = len(self._threads) + 1
                self._raw.write({"k": "thread", "id": tid, "name": name})
                self._thread = tid
                if start is not None:
                    self._raw.write({"k": "host_wait", "signal": start[0], "at": start[1]})
                return
        if tid != self._thread:
            self._raw.write({"k": "thread", "id": tid})
            self._thread = tid

    def signal(self, site):
        """The calling thread marks where it stands (a queue's put, a thread's start or end):
        returns the signal another thread's wait_signal names."""
        with self._lock:
            sid = self._next_signal
            self._next_signal += 1
            self._w.write({"k": "host_signal", "id": sid, "at": site})
            return sid

    def wait_signal(self, sid, site):
        """The calling thread has waited for the mark `sid` (the get, the join); None: none."""
        if sid is None:
            return
        with self._lock:
            self._w.write({"k": "host_wait", "signal": sid, "at": site})

    # -- end -----------------------------------------------------------------------------
    def close(self, partial=None, where=None):
        """partial: why the rank did not finish; where: (file, line, func) it stopped at."""
        with self._lock:
            site = self.site(*where) if where is not None and partial is not None else None
            self._w.close(partial, site)

    def abandon(self):
        with self._lock:
            self._w.abandon()
