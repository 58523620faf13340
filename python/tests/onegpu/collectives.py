"""Every collective a data-parallel program calls, on the one-GPU backend, each against a
reference every rank computes from every rank's inputs; and the stream semantics a program sees.
Run at 4 ranks:

    python3 -m shardcheck.capture --nproc-per-node 4 --out DIR -- tests/onegpu/collectives.py

(SHARDCHECK_ONE_GPU_SLOT_MB=1 SHARDCHECK_ONE_GPU_PIPE_MB=1 makes the larger tensors go in
several rounds.) Prints one line per check on rank 0, and any rank's wrong result, then
"rank R: N wrong"; exits 1 when any result was wrong.
"""
import os
import sys
import traceback

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
failures = []
BIG = 700_000  # 2.8 MB of f32: several rounds with 1 MiB slots


def check(what, got, want, exact=False):
    # bf16 keeps 8 significant bits: a sum rounded at every partial differs from the one
    # rounded once by up to a few parts in 256, as NCCL's own bf16 reductions do.
    rtol = 2e-2 if got.dtype == torch.bfloat16 else 1e-4
    got, want = got.detach().cpu(), want.detach().cpu()
    if exact:
        ok = got.shape == want.shape and torch.equal(got, want)
    else:
        ok = got.shape == want.shape and torch.allclose(got.double(), want.double(), rtol=rtol,
                                                        atol=1e-3)
    if not ok:
        failures.append(what)
    if rank == 0 or not ok:
        detail = "" if ok else " WRONG: got %s, want %s" % (got.flatten()[:6].tolist(),
                                                             want.flatten()[:6].tolist())
        print("rank %d %-48s %s%s" % (rank, what, "ok" if ok else "", detail), flush=True)


def guarded(fn):
    try:
        fn()
    except Exception as e:  # one broken collective must not hide the others' results
        failures.append(fn.__name__)
        print("rank %d %-48s RAISED %s: %s" % (rank, fn.__name__, type(e).__name__, e), flush=True)
        where = traceback.extract_tb(e.__traceback__)
        print("rank %d   at %s" % (rank, "; ".join("%s:%d" % (os.path.basename(f.filename), f.lineno)
                                                 for f in where[-4:])), flush=True)


def data(r, n=6, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) % 97 * (r + 1) + r).to(dtype)


every = [data(r) for r in range(world)]


@guarded
def all_reduce_ops():
    for name, op, ref in (("SUM", dist.ReduceOp.SUM, lambda xs: sum(xs)),
                          ("AVG", dist.ReduceOp.AVG, lambda xs: sum(xs) / len(xs)),
                          ("PRODUCT", dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
                          ("MIN", dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
                          ("MAX", dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values)):
        t = data(rank).to(dev)
        dist.all_reduce(t, op=op)
        check("all_reduce " + name, t, ref(every))
    t = data(rank).to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce PREMUL_SUM 0.5", t, sum(every) * 0.5)
    ti = torch.arange(5, dtype=torch.int64, device=dev) + rank * 1000
    dist.all_reduce(ti)
    check("all_reduce SUM int64 (exact)", ti,
          sum(torch.arange(5) + r * 1000 for r in range(world)), exact=True)
    bits = torch.tensor([1 << rank, 0xFF], dtype=torch.int32, device=dev)
    dist.all_reduce(bits, op=dist.ReduceOp.BOR)
    check("all_reduce BOR int32 (exact)", bits,
          torch.tensor([(1 << world) - 1, 0xFF], dtype=torch.int32), exact=True)
    h = data(rank, 1000, torch.bfloat16).to(dev)
    dist.all_reduce(h)
    check("all_reduce SUM bf16", h, sum(data(r, 1000, torch.bfloat16).float() for r in range(world)))
    big = data(rank, BIG).to(dev)
    dist.all_reduce(big)
    check("all_reduce SUM, %d elements" % BIG, big, sum(data(r, BIG) for r in range(world)))


@guarded
def all_gather_forms():
    out = torch.empty(6 * world, device=dev)
    dist.all_gather_into_tensor(out, data(rank).to(dev))
    check("all_gather_into_tensor", out, torch.cat(every))
    outs = [torch.empty(6, device=dev) for _ in range(world)]
    dist.all_gather(outs, data(rank).to(dev))
    check("all_gather (list)", torch.cat(outs), torch.cat(every))
    out = torch.empty(BIG * world, device=dev)
    dist.all_gather_into_tensor(out, data(rank, BIG).to(dev))
    check("all_gather_into_tensor, %d elements" % BIG, out,
          torch.cat([data(r, BIG) for r in range(world)]))
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    check("all_gather_object", torch.tensor([o["rank"] for o in objs]), torch.arange(world),
          exact=True)


@guarded
def reduce_scatter_forms():
    full = [data(r, 6 * world) for r in range(world)]
    o = torch.empty(6, device=dev)
    dist.reduce_scatter_tensor(o, full[rank].to(dev))
    check("reduce_scatter_tensor SUM", o, sum(full).chunk(world)[rank])
    dist.reduce_scatter_tensor(o, full[rank].to(dev), op=dist.ReduceOp.AVG)
    check("reduce_scatter_tensor AVG", o, (sum(full) / world).chunk(world)[rank])
    dist.reduce_scatter_tensor(o, full[rank].to(dev), op=dist._make_nccl_premul_sum(0.25))
    check("reduce_scatter_tensor PREMUL_SUM 0.25", o, (sum(full) * 0.25).chunk(world)[rank])
    o = torch.empty(6, device=dev)
    dist.reduce_scatter(o, [c.to(dev) for c in full[rank].chunk(world)])
    check("reduce_scatter (list)", o, sum(full).chunk(world)[rank])
    bigs = [data(r, BIG * world) for r in range(world)]
    o = torch.empty(BIG, device=dev)
    dist.reduce_scatter_tensor(o, bigs[rank].to(dev))
    check("reduce_scatter_tensor, %d elements out" % BIG, o, sum(bigs).chunk(world)[rank])


@guarded
def rooted():
    t = data(rank).to(dev)
    dist.broadcast(t, src=world - 1)
    check("broadcast src=%d" % (world - 1), t, every[world - 1])
    t = data(rank).to(dev)
    dist.reduce(t, dst=1)
    check("reduce dst=1", t, sum(every) if rank == 1 else every[rank])
    gathered = [torch.empty(6, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(data(rank).to(dev), gathered, dst=0)
    if rank == 0:
        check("gather dst=0", torch.cat(gathered), torch.cat(every))
    o = torch.empty(6, device=dev)
    dist.scatter(o, [data(r).to(dev) for r in range(world)] if rank == 0 else None, src=0)
    check("scatter src=0", o, every[rank])
    objs = [{"from": rank}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    check("broadcast_object_list", torch.tensor(objs[0]["from"]), torch.tensor(0), exact=True)


@guarded
def all_to_all_forms():
    inp = torch.arange(world * 2, dtype=torch.float32, device=dev) + 100 * rank
    o = torch.empty_like(inp)
    dist.all_to_all_single(o, inp)
    want = torch.cat([(torch.arange(world * 2, dtype=torch.float32) + 100 * r)[2 * rank:2 * rank + 2]
                      for r in range(world)])
    check("all_to_all_single", o, want)
    # Uneven: rank r sends q+1 rows of width 3 to rank q.
    send_rows = [q + 1 for q in range(world)]
    recv_rows = [rank + 1] * world
    inp = torch.cat([torch.full((q + 1, 3), float(rank * 10 + q)) for q in range(world)]).to(dev)
    o = torch.empty(sum(recv_rows), 3, device=dev)
    dist.all_to_all_single(o, inp, recv_rows, send_rows)
    want = torch.cat([torch.full((rank + 1, 3), float(r * 10 + rank)) for r in range(world)])
    check("all_to_all_single, uneven splits", o, want)
    ins = [torch.full((r + 1,), float(rank * 10 + r), device=dev) for r in range(world)]
    outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    check("all_to_all (list)", torch.cat(outs),
          torch.cat([torch.full((rank + 1,), float(r * 10 + rank)) for r in range(world)]))


@guarded
def point_to_point():
    right, left = (rank + 1) % world, (rank - 1) % world
    send = data(rank, BIG).to(dev)
    recv = torch.empty_like(send)
    ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    check("batch_isend_irecv ring, %d elements" % BIG, recv, data(left, BIG))
    recv2 = torch.empty_like(send)
    if rank % 2 == 0:
        dist.send(send, right)
        dist.recv(recv2, left)
    else:
        dist.recv(recv2, left)
        dist.send(send, right)
    check("send/recv ring, %d elements" % BIG, recv2, data(left, BIG))
    # Both ways at once without a batch: the backend's pair pipes hold a chunk each way, so this
    # runs here; NCCL documents that a send may block until its receive runs (docs/p2p.md).
    a, b = data(rank, BIG).to(dev), torch.empty(BIG, device=dev)
    peer = rank ^ 1
    if peer < world:
        w1 = dist.isend(a, peer)
        w2 = dist.irecv(b, peer)
        w1.wait()
        w2.wait()
        check("isend/irecv both ways, %d elements" % BIG, b, data(peer, BIG))


@guarded
def coalesced():
    a, b = data(rank).to(dev), data(rank, 3).to(dev)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    check("coalesced all_reduce (a)", a, sum(every))
    check("coalesced all_reduce (b)", b, sum(data(r, 3) for r in range(world)))
    o1, o2 = torch.empty(6 * world, device=dev), torch.empty(3 * world, device=dev)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(o1, data(rank).to(dev))
        dist.all_gather_into_tensor(o2, data(rank, 3).to(dev))
    cm.wait()
    check("coalesced all_gather_into_tensor", torch.cat([o1, o2]),
          torch.cat([torch.cat(every), torch.cat([data(r, 3) for r in range(world)])]))
    full = [data(r, 2 * world) for r in range(world)]
    o = torch.empty(2, device=dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.reduce_scatter_tensor(o, full[rank].to(dev))
    cm.wait()
    check("coalesced reduce_scatter_tensor (device=)", o, sum(full).chunk(world)[rank])


@guarded
def sub_groups():
    if world % 2:
        return
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    odds = dist.new_group([r for r in range(world) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mine)
    check("all_reduce on new_group", t, sum(every[r] for r in range(world) if r % 2 == rank % 2))
    if world != 4:
        return
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"))
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mesh.get_group("shard"))
    check("all_reduce on DeviceMesh shard dim", t,
          sum(every[r] for r in range(world) if r // 2 == rank // 2))
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mesh.get_group("replicate"))
    check("all_reduce on DeviceMesh replicate dim", t,
          sum(every[r] for r in range(world) if r % 2 == rank % 2))
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    full = torch.arange(16, dtype=torch.float32, device=dev).view(4, 4)
    d = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
    check("DTensor full_tensor (functional all_gather)", d.full_tensor(), full)
    s = d.redistribute(mesh, [Replicate(), Replicate()]).to_local()
    check("DTensor redistribute to replicate", s, full)


@guarded
def stream_semantics():
    # async_op=False: on the caller's stream, so later work on that stream sees the result.
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    torch.cuda._sleep(20_000_000)
    dist.all_reduce(x)
    check("all_reduce (sync) after a busy stream", x[:4],
          torch.full((4,), float(sum(range(1, world + 1)))))
    # async_op=True: its own stream, after what the caller's stream issued; wait() orders it.
    y = torch.full((1 << 20,), float(rank + 1), device=dev)
    torch.cuda._sleep(20_000_000)
    w = dist.all_reduce(y, async_op=True)
    w.wait()
    check("all_reduce (async) after a busy stream, then wait", y[:4],
          torch.full((4,), float(sum(range(1, world + 1)))))
    # Without the wait, a side stream reads the tensor before the collective ran: the race is
    # real on the hardware, as it is on NCCL.
    z = torch.full((1 << 20,), float(rank + 1), device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda._sleep(100_000_000)
    w = dist.all_reduce(z, async_op=True)
    with torch.cuda.stream(side):
        early = z[:4].clone()
    side.synchronize()
    w.wait()
    check("async all_reduce read early on another stream (race)", early,
          torch.full((4,), float(rank + 1)))
    fut = dist.all_reduce(torch.ones(4, device=dev), async_op=True).get_future()
    check("get_future().wait()", fut.wait()[0], torch.full((4,), float(world)))


dist.barrier()
print("rank %d: %d wrong%s" % (rank, len(failures), (": " + ", ".join(failures)) if failures
                                 else ""), flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
