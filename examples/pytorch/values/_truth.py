"""Ground truth for the value reproducers, established without shardcheck: what each program
measures about itself when run with `--check-truth OUT.json`.

A program trains as its project wrote it and, while it does, a Probe keeps what the truth needs:
the gradients the first optimizer step takes (its `step` is wrapped, so the program's own line
runs unchanged), the parameters after every step, each rank's batches, and numbers the program
computed (a gradient norm, a learning rate). The program then builds a single-process reference
(the same model and initial weights on the concatenated global batch, whose mean loss defines
the correct gradient) and compares: a gradient's `factor` is its projection on the reference
(2.0 for a gradient twice too large) and its `residual` what the projection leaves
(|g - factor * ref| / |ref|: rounding when the bug only scales, large when it mixes wrong
terms). Replicas are compared across ranks bit for bit. Rank 0 writes the record; the test
(python/tests/test_ground_truth.py) asserts it.

Without --check-truth the Probe does nothing and the program issues only its own collectives,
so a capture sees the program alone.

The examples one folder up keep their lines as their captures pinned them, so they carry no
Probe: a `Seen` watches them from outside instead (their optimizer steps, the data they draw,
their all-reduces, their torch.empty buffers) while `watching` patches those torch functions,
and examples/pytorch/_ground_truth.py turns what it saw into their records.
"""

import contextlib
import json
import os
import sys
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _launch import device, finish, init  # noqa: E402  (examples/pytorch/_launch.py)

__all__ = ["Options", "Probe", "Reduction", "Seen", "Step", "compare", "device", "finish", "gather",
           "init", "main", "options", "replica_spread", "summarize", "write"]


class Options(NamedTuple):
    fix: bool
    truth: Optional[str]  # where rank 0 writes the ground-truth record, or None


def options(argv: List[str]) -> Options:
    truth = None
    if "--check-truth" in argv:
        at = argv.index("--check-truth")
        if at + 1 >= len(argv):
            sys.exit("--check-truth needs the path of the JSON record to write")
        truth = argv[at + 1]
    return Options(fix="--fix" in argv, truth=truth)


def _cpu(t: torch.Tensor) -> torch.Tensor:
    if hasattr(t, "to_local"):  # a DTensor: this rank's shard
        t = t.to_local()
    return t.detach().to("cpu", torch.float64).clone()


def _kept(t: torch.Tensor) -> torch.Tensor:
    """A host copy: floating point as float64, integers (token ids) as they are."""
    return _cpu(t) if t.is_floating_point() else t.detach().cpu().clone()


class Probe:
    """What the ground truth needs, kept only when `enabled`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.initial: Dict[str, torch.Tensor] = {}
        self.grads: Dict[str, torch.Tensor] = {}  # as the first optimizer step took them
        self.params: List[Dict[str, torch.Tensor]] = []  # after each optimizer step
        self.batches: List[Tuple[torch.Tensor, ...]] = []
        self.notes: Dict[str, List[float]] = {}

    def watch(self, opt: torch.optim.Optimizer, named: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """Keep the initial values of `named`, their gradients at `opt`'s first step and their
        values after every step."""
        if not self.enabled:
            return
        named = list(named)
        self.initial = {n: _cpu(p) for n, p in named}
        step = opt.step

        def watched(*args: Any, **kwargs: Any) -> Any:
            if not self.params:
                self.grads = {n: _cpu(p.grad) for n, p in named if p.grad is not None}
            out = step(*args, **kwargs)
            self.params.append({n: _cpu(p) for n, p in named})
            return out

        opt.step = watched  # type: ignore[assignment]

    def batch(self, *tensors: torch.Tensor) -> None:
        if self.enabled:
            self.batches.append(tuple(_kept(t) for t in tensors))

    def note(self, key: str, value: float) -> None:
        if self.enabled:
            self.notes.setdefault(key, []).append(float(value))


def gather(obj: Any) -> List[Any]:
    """Every rank's `obj`, in rank order (on every rank)."""
    out: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def compare(got: torch.Tensor, ref: torch.Tensor) -> Dict[str, float]:
    got, ref = got.double().flatten(), ref.double().flatten()
    assert ref.norm() > 0, "a zero reference gradient would make the comparison vacuous"
    factor = float(got @ ref / (ref @ ref))
    residual = float((got - factor * ref).norm() / ref.norm())
    return {"factor": round(factor, 6), "residual": float("%.3g" % residual)}


def replica_spread(values: List[torch.Tensor]) -> float:
    """The largest difference between the copies one parameter has on several ranks."""
    return float(max((v - values[0]).abs().max() for v in values))


def write(path: Optional[str], record: Optional[Dict[str, Any]]) -> None:
    if path and record is not None and dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)


def main(run: Callable[[Options], Optional[Dict[str, Any]]]) -> None:
    """A reproducer's entry point: its ranks' group, its run, its record, the group's end."""
    init()
    opts = options(sys.argv)
    write(opts.truth, run(opts))
    finish()


def summarize(results: List[Dict[str, float]]) -> Dict[str, float]:
    """The range of the factors and the largest residual of several comparisons."""
    return {"factor_min": min(r["factor"] for r in results),
            "factor_max": max(r["factor"] for r in results),
            "residual_max": max(r["residual"] for r in results)}


class Step(NamedTuple):
    """One step of a watched optimizer, over its parameters in its own order."""
    lr: float
    params: List[torch.Tensor]  # as the step found them
    grads: List[Optional[torch.Tensor]]  # as it took them
    after: List[torch.Tensor]  # as it left them


class Reduction(NamedTuple):
    """One dist.all_reduce of a watched program."""
    before: torch.Tensor  # the tensor as the program passed it
    after: torch.Tensor  # once the call returned, or once its request's wait() did


class _Waited:
    """An asynchronous request whose first wait() also keeps what its tensor then holds."""

    def __init__(self, work: Any, done: Callable[[], None]) -> None:
        self._work, self._done = work, done

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        if self._done is not None:
            self._done()
            self._done = None
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class _Patches:
    """Attributes replaced for a while, put back in reverse order."""

    def __init__(self) -> None:
        self._undo: List[Tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def restore(self) -> None:
        while self._undo:
            owner, name, old = self._undo.pop()
            setattr(owner, name, old)


class Seen:
    """What a program did, watched from outside its lines while `watching()` lasts: every step
    of a torch.optim.SGD, every tensor it drew from a torch.Generator of its own (torch.randn
    and torch.randint called with generator=: its data), every dist.all_reduce and, with
    `empties`, every torch.empty. The copies go to the host; what the program computes does not
    change, and no collective is added."""

    def __init__(self, empties: bool = False) -> None:
        self.steps: List[Step] = []
        self.draws: List[torch.Tensor] = []
        self.reductions: List[Reduction] = []
        self.empties: List[torch.Tensor] = []
        self._watch_empties = empties
        self._patches = _Patches()

    def start(self) -> None:
        p = self._patches
        p.set(torch.optim.SGD, "step", self._step(torch.optim.SGD.step))
        p.set(torch, "randn", self._draw(torch.randn))
        p.set(torch, "randint", self._draw(torch.randint))
        p.set(dist, "all_reduce", self._all_reduce(dist.all_reduce))
        if self._watch_empties:
            p.set(torch, "empty", self._empty(torch.empty))

    def stop(self) -> None:
        self._patches.restore()

    @contextlib.contextmanager
    def watching(self) -> Iterator["Seen"]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def _step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def watched(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            params = [p for group in opt.param_groups for p in group["params"]]
            before = [_cpu(p) for p in params]
            grads = [None if p.grad is None else _cpu(p.grad) for p in params]
            out = step(opt, *args, **kwargs)
            self.steps.append(Step(float(opt.param_groups[0]["lr"]), before, grads,
                                   [_cpu(p) for p in params]))
            return out
        return watched

    def _draw(self, draw: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def watched(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = draw(*args, **kwargs)
            if kwargs.get("generator") is not None:
                self.draws.append(_kept(out))
            return out
        return watched

    def _all_reduce(self, all_reduce: Callable[..., Any]) -> Callable[..., Any]:
        def watched(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            before = _cpu(tensor)

            def done() -> None:
                self.reductions.append(Reduction(before, _cpu(tensor)))

            work = all_reduce(tensor, *args, **kwargs)
            if work is None:
                done()
                return work
            return _Waited(work, done)
        return watched

    def _empty(self, empty: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def watched(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = empty(*args, **kwargs)
            self.empties.append(out.detach().cpu().clone())  # the bytes as handed over
            return out
        return watched
