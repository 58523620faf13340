"""Value digests (docs/capture-format.md, `value` records): what a tensor held at a point of the
program, small enough to write for every collective and every parameter at every optimizer step.

A digest is computed where the tensor lives, by a few reductions on its device, with no copy of
the tensor to the host: two 31-bit polynomial hashes of its bytes (taken as 32-bit words, or
bytes when its size is not a multiple of 4), the sum and the sum of absolute values of its
elements in float64 (to tell "equal" from "equal up to rounding"), whether every word is the same
(a tensor of one repeated value, such as zeros), and its element count. On CUDA the digests wait
on the device, behind the work they read, and come to the host in one transfer at the next
optimizer step or at the end; on CPU they are written at once.

    v = Values(recorder, hooks)
    d = v.coll_input(tensor)              # before a collective runs: what it reads
    v.bind_coll(d, index, site)           # once the recorder has written the collective
    v.bind_coll(v.coll_output(out, stream), index, site, "out")   # what it wrote
    v.install()                            # digests of parameters and gradients at each step
"""

import gc
import os
import threading
import warnings

import torch

from . import hooks as _hooks

_ROW = 8192  # words a row: a row's weighted sum stays below 2**60
_P = 2147483647  # 2**31 - 1


def enabled():
    """Value capture is on unless SHARDCHECK_CAPTURE_VALUES=0 (the launcher's --no-values)."""
    return os.environ.get("SHARDCHECK_CAPTURE_VALUES", "1") not in ("0", "")


_bases = {}


def _weights(device):
    w = _bases.get(device)
    if w is None:
        i = torch.arange(_ROW, dtype=torch.int64, device=device)
        w = _bases[device] = (torch.remainder(i * 40503 + 1, 65521) + 1,
                              torch.remainder(i * 52711 + 7, 65519) + 1)
    return w


def _local(t):
    """The rank's own part of a DTensor (its local shard or replica); any other tensor itself."""
    local = getattr(t, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else t


def digest(t):
    """A float64 tensor on t's device: hash 1, hash 2, sum, sum of |x|, least word, greatest
    word, elements. Exact for the integers (all below 2**53)."""
    x = _local(t).detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    x = x.contiguous().view(-1)
    n = x.numel()
    if n == 0:
        return torch.zeros(7, dtype=torch.float64, device=x.device)
    raw = x if x.dtype == torch.uint8 else x.view(torch.uint8)
    words = (raw.view(torch.int32) if raw.numel() % 4 == 0 else raw).to(torch.int64)
    count = words.numel()
    rows = -(-count // _ROW)
    padded = torch.nn.functional.pad(words, (0, rows * _ROW - count)).view(rows, _ROW)
    w1, w2 = _weights(x.device)
    j = torch.arange(rows, dtype=torch.int64, device=x.device)
    hashes = []
    for w, a, b in ((w1, 48271, 11), (w2, 69621, 3)):
        per_row = torch.remainder((padded * w).sum(1), _P)
        factor = torch.remainder(j * a + b, 65521) + 1
        hashes.append(torch.remainder(torch.remainder(per_row * factor, _P).sum(), _P))
    real = x.to(torch.float64)
    parts = hashes + [real.sum(), real.abs().sum(), words.min(), words.max()]
    return torch.stack([p.to(torch.float64) for p in parts] +
                       [torch.tensor(float(n), dtype=torch.float64, device=x.device)])


def as_record(d):
    """A digest's 7 numbers as the fields of a value record: h, n, s, a, u."""
    h1, h2, s, a, lo, hi, n = d

    def number(v):
        return v if v == v and abs(v) != float("inf") else None  # JSON has no NaN

    return {"h": "%08x%08x" % (int(h1), int(h2)), "n": int(n), "s": number(s), "a": number(a),
            "u": bool(lo == hi)}


class Values:
    """Takes digests at the capture's points and writes them as `value` records."""

    def __init__(self, recorder, hooks):
        self.rec = recorder
        self.hooks = hooks
        self.cuda = hooks.cuda
        self._lock = threading.Lock()
        self._pending = []  # (record without "d", device digest, event or None)
        self._steps = {}  # id(optimizer) -> steps begun
        self._names = {}  # id(optimizer) -> [name per parameter]
        self._keep = []  # the optimizers of _steps/_names, so that their ids stay theirs
        self._undo = []
        self.skipped = 0  # tensors whose digest failed (none are expected)

    # -- points ---------------------------------------------------------------------------
    def _capturing(self):
        """Whether the current stream is capturing a CUDA graph: no digest then (its kernels
        would join the graph, and bringing digests to the host is not allowed while capturing)."""
        return self.cuda and torch.cuda.is_current_stream_capturing()

    def coll_input(self, tensor):
        """The input of the collective the recorder writes next, as it is about to be read (a
        list form's list: its tensors end to end, as the tensor form holds them). Returns the
        pending digest, to be bound to that collective's index by bind_coll."""
        if tensor is None or self._capturing():
            return None
        with _hooks.quiet():
            try:
                return self._take(_joined(tensor))
            except Exception:  # a tensor the digest cannot read: no value, never a failure
                self.skipped += 1
                return None

    def coll_output(self, tensor, stream_handle=None):
        """The output of a collective that has been issued: on CUDA, taken on the stream it runs
        on (stream_handle), behind it; on CPU, once it has finished."""
        if tensor is None or self._capturing():
            return None
        with _hooks.quiet():
            try:
                if self.cuda and stream_handle:
                    with torch.cuda.stream(torch.cuda.ExternalStream(stream_handle)):
                        return self._take(_joined(tensor))
                return self._take(_joined(tensor))
            except Exception:  # a tensor the digest cannot read: no value, never a failure
                self.skipped += 1
                return None

    def bind_coll(self, taken, index, site, side="in"):
        """Writes (once computed) the digest `taken` of the input (side "in") or output ("out")
        of the rank's collective number `index`."""
        if taken is None or index is None:
            return
        self._add({"k": "value", "of": "coll_" + side, "coll": index, "at": site}, taken)

    def before_step(self, optimizer):
        if self._capturing():
            return
        self.flush()
        site = self.hooks.site()
        step = self._steps.get(id(optimizer), 0)
        self._steps[id(optimizer)] = step + 1
        names = self._names_of(optimizer)
        with _hooks.quiet():
            for p, name in zip(self._params(optimizer), names):
                self._tensor("param", name, step, "before", p, site, where=True)
                if p.grad is not None:
                    self._tensor("grad", name, step, "before", p.grad, site, where=True)

    def after_step(self, optimizer):
        if self._capturing():
            return
        site = self.hooks.site()
        step = self._steps.get(id(optimizer), 1) - 1
        with _hooks.quiet():
            for p, name in zip(self._params(optimizer), self._names_of(optimizer)):
                self._tensor("param", name, step, "after", p, site)
        if not self.cuda:
            self.flush()

    # -- writing --------------------------------------------------------------------------
    def _take(self, tensor):
        d = digest(tensor)
        event = None
        if self.cuda and d.is_cuda:
            event = torch.cuda.Event()
            event.record()
        return d, event

    def _tensor(self, role, name, step, when, t, site, where=False):
        """where: also name the bytes it occupies now (`r`), so that the checker can follow
        them into what is computed from them (a gradient into a norm)."""
        try:
            taken = self._take(t)
        except Exception:  # a tensor the digest cannot read: no value, never a failure
            self.skipped += 1
            return
        rec = {"k": "value", "of": role, "at": site, "taken": self.rec.records_so_far()}
        if name is not None:
            rec.update(tensor=name, step=step, when=when)
        span = _hooks.tensor_span(_local(t)) if where else None
        if span is not None and _local(t).device.type == self.hooks.device:
            r = self.rec.range_of(span)
            if r is not None:
                rec["r"] = r
        self._add(rec, taken)

    def _add(self, rec, taken):
        d, event = taken
        with self._lock:
            self._pending.append((rec, d, event))
        if event is None:
            self.flush()

    def flush(self):
        """Writes every pending digest (on CUDA: after the device has computed them); while a
        graph is being captured they wait for the next flush."""
        if self._capturing():
            return
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        with _hooks.quiet():
            for _, _, event in pending:
                if event is not None:
                    event.synchronize()
            numbers = torch.stack([d.cpu() for _, d, _ in pending]).tolist()
        for (rec, _, _), d in zip(pending, numbers):
            rec = dict(rec)
            rec.update(as_record(d))
            self.rec.value(rec)

    # -- parameters -----------------------------------------------------------------------
    @staticmethod
    def _params(optimizer):
        return [p for g in optimizer.param_groups for p in g["params"]]

    def _names_of(self, optimizer):
        names = self._names.get(id(optimizer))
        if names is None:
            known = _parameter_names()
            index = len(self._names)
            names = [known.get(id(p)) or "optimizer %d parameter %d" % (index, i)
                     for i, p in enumerate(self._params(optimizer))]
            self._names[id(optimizer)] = names
            self._keep.append(optimizer)
        return names

    def loss(self, tensors):
        """The tensors a backward starts from (the losses), before it runs: which ranks compute
        one loss together is read from them (docs/findings.md, "Values in captures")."""
        if self._capturing():
            return
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        site = self.hooks.site()
        with _hooks.quiet():
            for t in tensors:
                if isinstance(t, torch.Tensor) and t.numel() <= 64:
                    self._tensor("loss", None, None, None, t, site, where=True)

    def _follow_losses(self):
        """torch.autograd.backward, which Tensor.backward calls: its roots' digests."""
        import torch.autograd
        values, orig = self, torch.autograd.backward

        def backward(tensors, *args, **kwargs):
            values.loss(tensors)
            return orig(tensors, *args, **kwargs)

        backward.__wrapped__ = orig
        torch.autograd.backward = backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", orig))

    def install(self):
        """Digests of every parameter and gradient before each optimizer step, and of the
        parameters after it: torch's global step hooks where it has them (2.0 on), else each
        optimizer class's step; and of the losses each backward starts from."""
        self._follow_losses()
        values = self
        import torch.optim.optimizer as opt
        pre = getattr(opt, "register_optimizer_step_pre_hook", None)
        post = getattr(opt, "register_optimizer_step_post_hook", None)
        if pre is not None and post is not None:
            handles = [pre(lambda o, a, k: values.before_step(o)),
                       post(lambda o, a, k: values.after_step(o))]
            self._undo.append(lambda: [h.remove() for h in handles])
            return
        for cls in _optimizer_classes():
            orig = cls.__dict__["step"]

            def step(self_, *args, _orig=orig, **kwargs):
                values.before_step(self_)
                out = _orig(self_, *args, **kwargs)
                values.after_step(self_)
                return out

            step.__wrapped__ = orig
            setattr(cls, "step", step)
            self._undo.append(lambda cls=cls, orig=orig: setattr(cls, "step", orig))

    def uninstall(self):
        for undo in reversed(self._undo):
            undo()
        self._undo = []


def _optimizer_classes():
    seen, todo = [], [torch.optim.Optimizer]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return [c for c in seen if "step" in c.__dict__]


def _joined(side):
    """A collective's side: a tensor, or a list form's tensors end to end in one."""
    if isinstance(side, (list, tuple)):
        return torch.cat([_local(t).detach().reshape(-1) for t in side])
    return side


class ParameterNames:
    """The name of the parameter whose storage is at a pointer (recorder.Recorder.param_name),
    for a collective's tensor that existed before the capture: from the modules alive when first
    asked, and again for a pointer not known then, a few times at most (each looks at every
    object the garbage collector tracks)."""

    _LOOKS = 8

    def __init__(self, device):
        self.device = device
        self._names = None
        self._looks = 0

    def __call__(self, ptr):
        if self._names is None or (ptr not in self._names and self._looks < self._LOOKS):
            self._looks += 1
            self._names = {}
            for p, name in _parameters():
                local = _local(p)
                span = _hooks.tensor_span(local) if local.device.type == self.device else None
                if span is not None:
                    self._names.setdefault(span[0], name)
        return self._names.get(ptr)


def _parameters():
    """(parameter, its name in the outermost module that holds it), shortest names first."""
    with warnings.catch_warnings():  # an isinstance of some objects warns (torch's reduce_op)
        warnings.simplefilter("ignore")
        modules = [m for m in gc.get_objects() if isinstance(m, torch.nn.Module)]
    inner = {id(c) for m in modules for c in m.children()}
    found = []
    for m in modules:
        if id(m) not in inner:
            found += [(p, name) for name, p in m.named_parameters()]
    return sorted(found, key=lambda pn: (len(pn[1]), pn[1]))


def _parameter_names():
    """id(parameter) -> its name in the outermost module that holds it ("module.fc.weight"
    under DDP), from the modules alive now."""
    with warnings.catch_warnings():  # an isinstance of some objects warns (torch's reduce_op)
        warnings.simplefilter("ignore")
        modules = [m for m in gc.get_objects() if isinstance(m, torch.nn.Module)]
    inner = {id(c) for m in modules for c in m.children()}
    names = {}
    for m in modules:
        if id(m) in inner:
            continue
        for name, p in m.named_parameters():
            # One name on every rank whatever order the modules come in: the shortest.
            old = names.get(id(p))
            if old is None or (len(name), name) < (len(old), old):
                names[id(p)] = name
    return names
