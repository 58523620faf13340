"""What one torch.distributed call is in the capture format (docs/capture-format.md,
"Collectives"): a list of Calls, each a collective, one half of a point-to-point transfer, or the
copy a rank makes of its own part.

- The tensor forms (all_reduce, all_gather_into_tensor, ...) are one collective each.
- all_gather into a list and reduce_scatter from one are one collective whose list side is a
  list of tensors, one per member (the format's list of ranges, version 2).
- gather, scatter and all_to_all of lists (and all_to_all_single with uneven splits) are the
  transfers NCCL makes them of (ProcessGroupNCCL::gather, scatter and alltoall issue ncclSend
  and ncclRecv within one group): with each other member in ascending group rank, the lower rank
  of a pair sending first, and a copy of the rank's own part. Their members' tensors may differ
  in size, which one collective record could not say; the checker pairs each transfer with its
  peer's, as NCCL does.

A call whose own arguments disagree (an output of another size than the input) is none of
these: the backend refuses it on that rank before anything moves, and ``None`` says so.
"""

from typing import List, NamedTuple, Optional

import torch


class Call(NamedTuple):
    """One record of a torch.distributed call. op: a collective of the format ("all_reduce",
    ... "barrier"), "send" or "recv" (one half of a transfer with group rank ``peer``), or
    "copy" (the rank's own part, from ``inp`` to ``out``). inp, out: a tensor, a list of tensors
    (a list form's list side), or None (a barrier). count: the format's `count`."""

    op: str
    inp: object
    out: object
    count: int
    peer: Optional[int] = None


def tensors_of(side) -> List[torch.Tensor]:
    """A call's side as a list of tensors: [] for None."""
    if side is None:
        return []
    return list(side) if isinstance(side, (list, tuple)) else [side]


def _alike(ts, like) -> bool:
    return all(t.numel() == like.numel() and t.dtype == like.dtype for t in ts)


def all_gather_list(inp, outs) -> Optional[List[Call]]:
    """dist.all_gather(outs, inp): outs[p] gets member p's inp."""
    outs = list(outs)
    if not outs or not _alike(outs, inp):
        return None
    return [Call("all_gather", inp, outs, inp.numel())]


def reduce_scatter_list(ins, out) -> Optional[List[Call]]:
    """dist.reduce_scatter(out, ins): out gets the reduction of every member's ins[me]."""
    ins = list(ins)
    if not ins or not _alike(ins, out):
        return None
    return [Call("reduce_scatter", ins, out, out.numel())]


def _pair(me, peer, to_peer, from_peer) -> List[Call]:
    """The transfers with one peer, the lower rank of the pair sending first (so that the
    members' sequences of blocking transfers never wait for each other in a cycle)."""
    calls = []
    send = Call("send", to_peer, to_peer, to_peer.numel(), peer) if to_peer is not None else None
    recv = Call("recv", from_peer, from_peer, from_peer.numel(), peer) \
        if from_peer is not None else None
    for c in ((send, recv) if me < peer else (recv, send)):
        if c is not None:
            calls.append(c)
    return calls


def gather(inp, outs, root, me, size) -> Optional[List[Call]]:
    """dist.gather(inp, outs, dst): the root's outs[p] gets member p's inp."""
    if me != root:
        return _pair(me, root, inp, None)
    outs = list(outs)
    if len(outs) != size or not _alike(outs, inp):
        return None
    calls = [Call("copy", inp, outs[me], inp.numel())]
    for p in range(size):
        if p != me:
            calls += _pair(me, p, None, outs[p])
    return calls


def scatter(out, ins, root, me, size) -> Optional[List[Call]]:
    """dist.scatter(out, ins, src): member p's out gets the root's ins[p]."""
    if me != root:
        return _pair(me, root, None, out)
    ins = list(ins)
    if len(ins) != size or not _alike(ins, out):
        return None
    calls = [Call("copy", ins[me], out, out.numel())]
    for p in range(size):
        if p != me:
            calls += _pair(me, p, ins[p], None)
    return calls


def all_to_all(outs, ins, me, size) -> Optional[List[Call]]:
    """dist.all_to_all(outs, ins): member p's outs[q] gets member q's ins[p]."""
    outs, ins = list(outs), list(ins)
    if len(outs) != size or len(ins) != size or not _alike([outs[me]], ins[me]):
        return None
    calls = [Call("copy", ins[me], outs[me], ins[me].numel())] if ins[me].numel() else []
    for p in range(size):
        if p != me:
            calls += _pair(me, p, ins[p] if ins[p].numel() else None,
                           outs[p] if outs[p].numel() else None)
    return calls


def split_rows(t, sizes, size) -> Optional[List[torch.Tensor]]:
    """all_to_all_single's blocks of t: its rows split by ``sizes`` (None when they do not add up
    to its rows)."""
    if t.dim() == 0 or len(sizes) != size or sum(sizes) != t.shape[0]:
        return None
    return list(t.split(list(sizes)))


def all_to_all_single(out, inp, out_splits, in_splits, me, size) -> Optional[List[Call]]:
    """dist.all_to_all_single(out, inp, out_splits, in_splits): without splits, even blocks, one
    all_to_all collective; with them, its transfers (splits that happen to be even on one rank
    may not be on another, which passes the same arguments and records the same way)."""
    out_splits, in_splits = list(out_splits or []), list(in_splits or [])
    if not out_splits and not in_splits:
        if inp.numel() != out.numel() or inp.numel() % size:
            return None
        return [Call("all_to_all", inp, out, inp.numel())]
    outs = split_rows(out, out_splits or [out.shape[0] // size] * size, size)
    ins = split_rows(inp, in_splits or [inp.shape[0] // size] * size, size)
    if outs is None or ins is None:
        return None
    return all_to_all(outs, ins, me, size)
