"""Ground truth of the examples of this folder, established without shardcheck: with
`--check-truth OUT.json` an example runs as it always does while a Seen (values/_truth.py) watches
it from outside its lines, and just before its process group ends its ranks exchange what they saw
and rank 0 writes the record made here: its gradients against a single-process reference of the
same global loss and data, its replicas compared across the ranks, its norm against
torch.nn.utils.clip_grad_norm_ of the reference, the values an in-place race left, or the bytes
torch.empty handed over. python/tests/test_example_truth.py runs the examples and asserts them;
examples/pytorch/README.md has the table.

The examples keep every line where their captures pinned it, so none of this is in them:
_launch.py, which every example imports, calls `watch_until_the_group_ends` when --check-truth is
given, and the examples of values/, which measure themselves, are left alone. Without
--check-truth nothing here runs and an example issues only its own collectives and operators.
"""

from __future__ import annotations  # _truth may still be loading when _launch.py imports this

import hashlib
import os
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "values"))

import _truth  # noqa: E402  (examples/pytorch/values/_truth.py)

Record = Optional[Dict[str, Any]]


class Run(NamedTuple):
    program: str  # the example's file name without .py
    flags: List[str]  # its own flags (--fix, --scheduler)
    out: str  # where rank 0 writes the record

    @property
    def fix(self) -> bool:
        return "--fix" in self.flags


def run_of(argv: List[str]) -> Optional[Run]:
    """The run `argv` asks for: an example with a ground truth here, with --check-truth; None
    otherwise (the reproducers of values/ measure themselves)."""
    program = os.path.splitext(os.path.basename(argv[0]))[0]
    if program not in TRUTHS or "--check-truth" not in argv:
        return None
    flags = [a for a in argv[1:] if a.startswith("--") and a != "--check-truth"]
    return Run(program, flags, _truth.options(argv).truth)


def _named(names: List[str], tensors: List[Any]) -> Dict[str, Any]:
    assert len(names) == len(tensors), "the optimizer holds %d tensors, the model %d" % (
        len(tensors), len(names))
    return dict(zip(names, tensors))


def _header(run: Run, kind: str) -> Dict[str, Any]:
    return {"program": run.program, "flags": run.flags, "fix": run.fix, "class": kind}


def _reference_grads(model: torch.nn.Module, loss: Callable[[], torch.Tensor]) -> Dict[str, torch.Tensor]:
    loss().backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _compare_groups(rows: List[Dict[str, Any]], ref: Dict[str, torch.Tensor],
                    group: Callable[[str], str]) -> Dict[str, Dict[str, float]]:
    """Every rank's first-step gradients against the reference, summarized by `group(name)`."""
    found: Dict[str, List[Dict[str, float]]] = {}
    for row in rows:
        for name, g in row["grads"].items():
            found.setdefault(group(name), []).append(_truth.compare(g, ref[name]))
    return {k: _truth.summarize(v) for k, v in sorted(found.items())}


def _spread(copies: List[Dict[str, torch.Tensor]], group: Callable[[str], str]) -> Dict[str, float]:
    """The largest difference between the ranks' copies (each a dict of named tensors), by group."""
    out: Dict[str, float] = {}
    for name in copies[0]:
        spread = _truth.replica_spread([copy[name] for copy in copies])
        out[group(name)] = max(out.get(group(name), 0.0), spread)
    return out


# Data parallelism by hand: replica_drift.py, double_reduction.py


def _data_parallel_rows(seen: _truth.Seen, names: List[str], draws_per_step: int) -> List[Dict[str, Any]]:
    first = seen.steps[0]
    return _truth.gather({
        "initial": _named(names, first.params), "grads": _named(names, first.grads),
        "batch": seen.draws[:draws_per_step], "lr": [s.lr for s in seen.steps],
        "step_grads": [_named(names, s.grads) for s in seen.steps],
        "after": [_named(names, s.after) for s in seen.steps]})


def replica_drift(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """Reference: Model on every rank's first batch, mean squared error over the global batch."""
    names = [n for n, _ in prog.Model().named_parameters()]
    rows = _data_parallel_rows(seen, names, 2)
    if dist.get_rank() != 0:
        return None
    model = prog.Model().double()
    model.load_state_dict(rows[0]["initial"])
    x = torch.cat([row["batch"][0] for row in rows])
    y = torch.cat([row["batch"][1] for row in rows])
    ref = _reference_grads(model, lambda: F.mse_loss(model(x), y))
    part = lambda name: name.split(".")[0]  # noqa: E731  (body or head)
    steps = range(len(rows[0]["lr"]))
    record = _header(run, "replica_divergence" if "--scheduler" in run.flags else "missing_reduction")
    record.update(_compare_groups(rows, ref, part))
    record["initial_spread"] = max(_spread([row["initial"] for row in rows], part).values())
    record["lr_by_rank"] = [row["lr"] for row in rows]
    record["grad_spread"] = [max(_spread([row["step_grads"][k] for row in rows], part).values()) for k in steps]
    record["param_spread"] = [_spread([row["after"][k] for row in rows], part) for k in steps]
    return record


def double_reduction(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """Reference: Model on every rank's first batch, mean of the squared outputs."""
    names = [n for n, _ in prog.Model().named_parameters()]
    rows = _data_parallel_rows(seen, names, 1)
    if dist.get_rank() != 0:
        return None
    model = prog.Model().double()
    model.load_state_dict(rows[0]["initial"])
    x = torch.cat([row["batch"][0] for row in rows])
    ref = _reference_grads(model, lambda: model(x).pow(2).mean())
    part = lambda name: "router" if name.startswith("router.") else "experts"  # noqa: E731
    record = _header(run, "double_reduction")
    record.update(_compare_groups(rows, ref, part))
    last = len(rows[0]["lr"]) - 1
    record["param_spread"] = _spread([row["after"][last] for row in rows], part)
    return record


# Expert parallelism by hand: expert_parallel.py


def expert_parallel(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """Reference: the router and both experts on one process, every rank's first batch routed
    as the program routes it, the mean of the 4 ranks' losses."""
    names = [n for n, _ in prog.Layer(None).named_parameters()]
    first = seen.steps[0]
    rows = _truth.gather({"initial": _named(names, first.params), "grads": _named(names, first.grads),
                          "batch": seen.draws[0]})
    if dist.get_rank() != 0:
        return None
    router = torch.nn.Linear(16, prog.EP).double()
    router.load_state_dict({k[len("router."):]: v for k, v in rows[0]["initial"].items()
                            if k.startswith("router.")})
    experts = []
    for e in range(prog.EP):  # expert e as rank e holds it
        expert = torch.nn.Linear(16, 16).double()
        expert.load_state_dict({k[len("expert."):]: v for k, v in rows[e]["initial"].items()
                                if k.startswith("expert.")})
        experts.append(expert)
    losses = []
    for row in rows:
        x = row["batch"]
        gate = torch.softmax(router(x), dim=-1)
        # The tokens each expert takes, picked as the program's float32 router picked them.
        picked = torch.softmax(F.linear(x.float(), router.weight.detach().float(), router.bias.detach().float()),
                               dim=-1).topk(prog.CAPACITY, dim=0)[1]
        out = torch.zeros_like(x)
        for e, expert in enumerate(experts):
            rows_e = picked[:, e]
            out = out.index_add(0, rows_e, torch.relu(expert(x[rows_e])) * gate[rows_e, e:e + 1])
        losses.append(out.pow(2).mean())
    torch.stack(losses).mean().backward()
    ref = {"router." + n: p.grad for n, p in router.named_parameters()}
    dense, expert_cmp = [], []
    for rank, row in enumerate(rows):
        for name, g in row["grads"].items():
            if name.startswith("router."):
                dense.append(_truth.compare(g, ref[name]))
            else:
                held = dict(experts[rank % prog.EP].named_parameters())[name[len("expert."):]]
                expert_cmp.append(_truth.compare(g, held.grad))
    record = _header(run, "divisor_mismatch")
    record.update({"router": _truth.summarize(dense), "expert": _truth.summarize(expert_cmp)})
    return record


# Gradient norms: tied_norm.py, tp_norm.py, dtensor_tp.py


def _norms(seen: _truth.Seen) -> List[float]:
    """The norm of each step as the program computed it: the square root of the one-element
    all-reduce of its squares."""
    return [float(r.after.sum()) ** 0.5 for r in seen.reductions if r.after.numel() == 1]


def _norm_record(rows: List[Dict[str, Any]], ref_norm: float, counted_sq: float) -> Dict[str, Any]:
    norms = [row["norm"] for row in rows]
    return {"norm": norms[0], "norm_spread": max(norms) - min(norms), "reference_norm": ref_norm,
            "norm_ratio": round(norms[0] / ref_norm, 6),
            # How many times the terms of `counted_sq` are in the program's squared norm.
            "counted": round((norms[0] ** 2 - ref_norm ** 2) / counted_sq + 1, 4)}


def tied_norm(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """Reference: both stages on one process with one embedding (the head tied to it), the same
    tokens; its norm is clip_grad_norm_'s, and its gradients clipped to 1.0 as the program clips."""
    names = ["shared", "layer.weight", "layer.bias"]
    first = seen.steps[0]
    rows = _truth.gather({"initial": _named(names, first.params), "grads": _named(names, first.grads),
                          "tokens": seen.draws[0], "norm": _norms(seen)[0]})
    if dist.get_rank() != 0:
        return None
    emb = rows[0]["initial"]["shared"].clone().requires_grad_()
    layers = []
    for row in rows:  # stage s's layer as rank s holds it
        layer = torch.nn.Linear(prog.WIDTH, prog.WIDTH).double()
        layer.load_state_dict({"weight": row["initial"]["layer.weight"], "bias": row["initial"]["layer.bias"]})
        layers.append(layer)
    tokens = rows[0]["tokens"]
    logits = layers[1](layers[0](emb[tokens])) @ emb.t()
    F.cross_entropy(logits, tokens).backward()
    params = [emb] + [p for layer in layers for p in layer.parameters()]
    ref_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf")))
    record = _header(run, "grad_norm_miscount")
    record.update(_norm_record(rows, ref_norm, float(emb.grad.pow(2).sum())))
    torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
    stepped = []
    for rank, row in enumerate(rows):
        stepped.append(_truth.compare(row["grads"]["shared"], emb.grad))
        stepped.append(_truth.compare(row["grads"]["layer.weight"], layers[rank].weight.grad))
    record["stepped"] = _truth.summarize(stepped)
    return record


class Split(NamedTuple):
    """A tensor-parallel block's parameter names: those split (by rows: dimension 0, or by
    columns: 1) and those every rank holds whole."""
    up: str
    down: str
    norm: str  # the LayerNorm's prefix


def _tensor_parallel(run: Run, seen: _truth.Seen, names: List[str], split: Split, width: int,
                     max_norm: float) -> Record:
    """Reference: the block with its whole weights (the ranks' parts put together) on the
    same batch; its norm is clip_grad_norm_'s, and its gradients clipped to `max_norm`."""
    first = seen.steps[0]
    rows = _truth.gather({"initial": _named(names, first.params), "grads": _named(names, first.grads),
                          "x": seen.draws[0], "norm": _norms(seen)[0]})
    if dist.get_rank() != 0:
        return None
    dims = {split.up: 0, split.down: 1}
    whole = {n: torch.cat([row["initial"][n] for row in rows], dims[n]) if n in dims else rows[0]["initial"][n]
             for n in names}
    w = {n: t.clone().requires_grad_() for n, t in whole.items()}
    x = rows[0]["x"]
    normed = F.layer_norm(x, (width,), w[split.norm + ".weight"], w[split.norm + ".bias"])
    (x + torch.relu(normed @ w[split.up].t()) @ w[split.down].t()).pow(2).mean().backward()
    params = [w[n] for n in names]
    ref_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf")))
    replicated_sq = sum(float(w[n].grad.pow(2).sum()) for n in names if n not in dims)
    record = _header(run, "grad_norm_miscount")
    record.update(_norm_record(rows, ref_norm, replicated_sq))
    torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
    stepped = []
    for rank, row in enumerate(rows):
        for n in names:
            ref = w[n].grad
            if n in dims:
                part = ref.shape[dims[n]] // len(rows)
                ref = ref.narrow(dims[n], rank * part, part)
            stepped.append(_truth.compare(row["grads"][n], ref))
    record["stepped"] = _truth.summarize(stepped)
    record["x_spread"] = _truth.replica_spread([row["x"] for row in rows])  # one batch for all
    return record


def tp_norm(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    names = [n for n, _ in prog.Block(0, dist.get_world_size()).named_parameters()]
    return _tensor_parallel(run, seen, names, Split("up", "down", "norm"), prog.WIDTH, prog.MAX_NORM)


def dtensor_tp(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    names = [n for n, _ in prog.Block().named_parameters()]
    return _tensor_parallel(run, seen, names, Split("up.weight", "down.weight", "norm"), prog.WIDTH,
                            prog.MAX_NORM)


# Races and never-written bytes: gloo_inplace_race.py, uninit_accumulator.py


def gloo_inplace_race(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """What each step's all-reduce left in the gradient once waited for, against the sum of the
    ranks' gradients (the reduction alone) and that sum clipped to [-1, 1] (what the step means
    to end with). Two ranks: one float32 addition per element, the same whichever rank adds."""
    rows = _truth.gather([(r.before, r.after) for r in seen.reductions])
    if dist.get_rank() != 0:
        return None
    vs_sum, vs_clipped = [], []
    for k in range(len(rows[0])):
        total = sum(row[k][0].float() for row in rows)
        vs_sum.append([int((row[k][1].float() != total).sum()) for row in rows])
        vs_clipped.append([int((row[k][1].float() != total.clamp(-1.0, 1.0)).sum()) for row in rows])
    record = _header(run, "stream_race")
    record.update({"elements": rows[0][0][0].numel(), "after_wait_vs_sum": vs_sum,
                   "after_wait_vs_clipped_sum": vs_clipped})
    return record


def uninit_accumulator(run: Run, seen: _truth.Seen, prog: Any) -> Record:
    """What torch.empty handed over for each step's accumulator, and the accumulator all-reduced
    (what the update subtracts from the parameters), to compare with the fix's run: its
    accumulator zeroed, its weights and data the same (the watch seeds torch's default generator,
    which the program leaves to torch: Debian's torch seeds it anew in every process)."""
    size = seen.reductions[0].after.numel()
    garbage = [int((e != 0).sum()) for e in seen.empties if e.numel() == size]
    rows = _truth.gather({"garbage": garbage,
                          "reduced": [hashlib.sha256(r.after.numpy().tobytes()).hexdigest()[:16]
                                      for r in seen.reductions]})
    if dist.get_rank() != 0:
        return None
    record = _header(run, "uninitialized_read")
    record.update({"elements": size,
                   "garbage_nonzero_by_step": [sum(g) for g in zip(*[row["garbage"] for row in rows])],
                   "reduced_by_step": rows[0]["reduced"],
                   "reduced_agree": all(row["reduced"] == rows[0]["reduced"] for row in rows)})
    return record


class Truth(NamedTuple):
    record: Callable[[Run, _truth.Seen, Any], Record]
    empties: bool = False  # watch torch.empty too
    seed: Optional[int] = None  # seed torch's default generator as the watch starts


TRUTHS: Dict[str, Truth] = {
    "replica_drift": Truth(replica_drift),
    "double_reduction": Truth(double_reduction),
    "expert_parallel": Truth(expert_parallel),
    "tied_norm": Truth(tied_norm),
    "tp_norm": Truth(tp_norm),
    "dtensor_tp": Truth(dtensor_tp),
    "gloo_inplace_race": Truth(gloo_inplace_race),
    "uninit_accumulator": Truth(uninit_accumulator, empties=True, seed=0),
}


class Watch:
    """One example's run under watch: `record()` ends the watch and writes its record (every
    rank calls it, with the group still up)."""

    def __init__(self, run: Run, truth: Truth) -> None:
        self.run, self.truth = run, truth
        self.seen = _truth.Seen(empties=truth.empties)
        if truth.seed is not None:
            torch.manual_seed(truth.seed)
        self.seen.start()

    def record(self) -> None:
        self.seen.stop()
        _truth.write(self.run.out, self.truth.record(self.run, self.seen, sys.modules["__main__"]))


def watch(argv: List[str]) -> Optional[Watch]:
    """Starts watching the example `argv` runs, where it asks for --check-truth and has a ground
    truth here; None otherwise."""
    run = run_of(argv)
    if run is None:
        return None
    return Watch(run, TRUTHS[run.program])


def watch_until_the_group_ends(argv: List[str]) -> None:
    """As `watch`, the record written just before the program's dist.destroy_process_group()
    (its _launch.finish()), while every rank can still exchange what it saw."""
    w = watch(argv)
    if w is None:
        return
    destroy = dist.destroy_process_group

    def recorded(*args: Any, **kwargs: Any) -> Any:
        dist.destroy_process_group = destroy
        w.record()
        return destroy(*args, **kwargs)

    dist.destroy_process_group = recorded
