"""Point-to-point requests, followed under a capture as the backend runs them
(docs/capture-format.md, "Point to point").

- gloo, CPU tensors (ProcessGroupGloo::send and recv): a request is posted at once and
  progresses on gloo's own threads until it is waited for; a send is done only once the peer
  has posted the matching receive, a receive once the data is in (measured, docs/p2p.md). The
  capture patches ProcessGroup.send, recv and recv_anysource (what dist.isend, irecv, send, recv
  and batch_isend_irecv call) to record each request on a stream of its own per group, peer and
  direction, after an event of the caller's stream and before an end event
  (Recorder.p2p_request), and Work.wait and Work.is_completed to record its wait: the host
  syncs with that end event where the program waits (work.wait(), the wait inside a blocking
  send or recv) or sees it done (is_completed() answering True).
- NCCL and the one-GPU backend run p2p on their streams, which the trace callbacks show
  (hooks.py); a batch_isend_irecv is one NCCL group call, whose transfers progress together:
  batch() marks it, and Recorder.p2p gives each of its transfers a stream of its own, forked
  from the batch's stream and joined back.

Not followed: a request waited through its future (work.get_future()), a recv from any source
before its wait (it is recorded at its wait, when its source is known), and p2p on gloo with
CUDA tensors.
"""

import threading

_batch = threading.local()


class batch:
    """The calls inside are one batch_isend_irecv (an NCCL group)."""

    def __enter__(self):
        _batch.depth = getattr(_batch, "depth", 0) + 1

    def __exit__(self, *exc):
        _batch.depth -= 1
        return False


def batching():
    return getattr(_batch, "depth", 0) > 0


def _args(args, kwargs, names):
    """The values of a pybind method's arguments, by position or by any of their names."""
    out = []
    for i, alternatives in enumerate(names):
        value = args[i] if i < len(args) else None
        for n in alternatives:
            if value is None:
                value = kwargs.get(n)
        out.append(value)
    return out


class Requests:
    """Installs the patches for one Hooks: patch(owner, name, make) records each for undoing."""

    def __init__(self, hooks, patch, quiet, span, dtype_and_count):
        self.hooks = hooks
        self.rec = hooks.rec
        self.patch = patch
        self.quiet = quiet  # thread-local: .on while a backend's own work runs
        self.span = span  # tensor -> its span (hooks.tensor_span), or None
        self.dtype_and_count = dtype_and_count  # tensor -> (dtype name, count) as records give them
        # Work -> (its requests' end events, what it is, None; or for a recv from any source,
        # which has no end event until its wait, [], what, (group, tensors, tag)): requests
        # posted and not yet seen waited for.
        self.pending = {}

    def install(self):
        import torch.distributed as dist
        if not dist.is_available():
            return
        from torch._C import _distributed_c10d as c10d
        self.patch(c10d.ProcessGroup, "send", self.posting("send"))
        self.patch(c10d.ProcessGroup, "recv", self.posting("recv"))
        if hasattr(c10d.ProcessGroup, "recv_anysource"):
            self.patch(c10d.ProcessGroup, "recv_anysource", self.posting_any)
        self.patch(c10d.Work, "wait", self.waiting)
        self.patch(c10d.Work, "is_completed", self.polling)

    # -- posting -------------------------------------------------------------------------
    def _followed(self, tensors):
        return not self.quieted() and tensors and \
            all(self.hooks._on_device(t) for t in tensors)

    def quieted(self):
        return getattr(self.quiet, "on", False)

    def _record(self, kind, pg, tensors, peer, tag, site):
        """The requests of one call (one per tensor): their end events, and what they are."""
        gid, ranks, gname = self.hooks._group(pg)
        peer = ranks[peer] if 0 <= peer < len(ranks) else peer
        where = "" if gname == "world" else " (%s)" % gname
        label = ("gloo send to %d" if kind == "send" else "gloo recv from %d") % peer + where
        ends = []
        for t in tensors:
            span = self.span(t)
            if span is None:
                continue
            dtype, count = self.dtype_and_count(t)
            # No name: it is compared across the pair, whose halves are different calls.
            ends.append(self.rec.p2p_request(kind, peer, gid, span, dtype, count, str(tag), "",
                                             site, label))
        what = ("isend to rank %d" if kind == "send" else "irecv from rank %d") % peer
        return ends, what

    def _call(self, orig, what, args, kwargs):
        """Runs a backend call the capture already recorded: its c10d operator is not recorded
        again, and a rank that hangs in it says so."""
        tls = self.hooks._tls
        was = getattr(tls, "inside", False)
        tls.inside = True
        self.hooks._enter_collective(what)
        try:
            return orig(*args, **kwargs)
        finally:
            self.hooks._leave_collective()
            tls.inside = was

    def posting(self, kind):
        requests = self

        def make(orig):
            def post(pg, *args, **kwargs):
                tensors, peer, tag = _args(args, kwargs, [("tensors",), ("dstRank", "srcRank"),
                                                          ("tag",)])
                if not requests._followed(tensors) or peer is None:
                    return orig(pg, *args, **kwargs)
                ends, what = requests._record(kind, pg, tensors, peer, tag or 0,
                                              requests.hooks.site())
                work = requests._call(orig, what, (pg,) + args, kwargs)
                if work is not None and ends:
                    requests.pending[work] = (ends, what, None)
                return work
            return post
        return make

    def posting_any(self, orig):
        requests = self

        def post(pg, *args, **kwargs):
            tensors, tag = _args(args, kwargs, [("tensors",), ("tag",)])
            if not requests._followed(tensors):
                return orig(pg, *args, **kwargs)
            site = requests.hooks.site()
            work = requests._call(orig, "irecv from any rank", (pg,) + args, kwargs)
            if work is not None:
                requests.pending[work] = ([], "irecv from any rank", (pg, tensors, tag or 0, site))
            return work
        return post

    # -- waiting ---------------------------------------------------------------------------
    def _waited(self, work, entry, site):
        """The host has waited for `work` at `site`: it syncs with each request's end."""
        ends, what, any_source = entry
        if any_source is not None:  # its source is known now that it is done
            pg, tensors, tag, posted = any_source  # named by the line that issued it
            source = getattr(work, "_source_rank", None) or getattr(work, "source_rank", None)
            try:
                ends, _ = self._record("recv", pg, tensors, source(), tag, posted)
            except Exception:
                return
        for end in ends:
            self.rec.event_sync(end, site)

    def waiting(self, orig):
        requests = self

        def wait(work, *args, **kwargs):
            entry = requests.pending.pop(work, None)
            if entry is None or requests.quieted():
                return orig(work, *args, **kwargs)
            site = requests.hooks.site()
            if entry[2] is None:  # recorded before it blocks: a rank that hangs here has it
                requests._waited(work, entry, site)
            requests.hooks._enter_collective("wait() of the " + entry[1])
            try:
                done = orig(work, *args, **kwargs)
            finally:
                requests.hooks._leave_collective()
            if entry[2] is not None:
                requests._waited(work, entry, site)
            return done
        return wait

    def polling(self, orig):
        requests = self

        def is_completed(work):
            done = orig(work)
            if done and not requests.quieted():
                entry = requests.pending.pop(work, None)
                if entry is not None:
                    requests._waited(work, entry, requests.hooks.site())
            return done
        return is_completed


def follow_batches(patch):
    """batch_isend_irecv under batch(), by whichever name the program reaches it."""
    import torch.distributed as dist
    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d as c10d

    orig = getattr(c10d, "batch_isend_irecv", None)
    if orig is None:
        return

    def batch_isend_irecv(p2p_op_list):
        with batch():
            return orig(p2p_op_list)

    for owner in (c10d, dist):
        if getattr(owner, "batch_isend_irecv", None) is orig:
            patch(owner, "batch_isend_irecv", lambda _: batch_isend_irecv)
