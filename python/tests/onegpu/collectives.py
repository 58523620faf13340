"""Every collective a data-parallel program calls, on the one-GPU backend, against a reference
every rank computes from every rank's inputs. Run at 4 ranks:

    python3 -m shardcheck.capture --nproc-per-node 4 --out DIR -- tests/onegpu/collectives.py

(tests/onegpu/run-on-gpu.sh runs it and the examples.)

Prints one line per check (rank 0, and any rank with a wrong result) and exits 1 when any
result was wrong.
"""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
failures = []


def check(what, got, want, exact=False):
    got, want = got.cpu(), want.cpu()
    ok = torch.equal(got, want) if exact else torch.allclose(got.double(), want.double(),
                                                            rtol=1e-5, atol=1e-5)
    if not ok:
        failures.append(what)
    if rank == 0 or not ok:
        print("rank %d %-44s %s" % (rank, what, "ok" if ok else "WRONG %s != %s" % (got, want)),
              flush=True)


def data(r, n=6, dtype=torch.float32):
    return (torch.arange(n, dtype=torch.float64) * (r + 1) + r).to(dtype)


every = [data(r) for r in range(world)]
for name, op, ref in (("SUM", dist.ReduceOp.SUM, lambda xs: sum(xs)),
                      ("AVG", dist.ReduceOp.AVG, lambda xs: sum(xs) / len(xs)),
                      ("PRODUCT", dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
                      ("MIN", dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
                      ("MAX", dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values)):
    t = data(rank).to(dev)
    dist.all_reduce(t, op=op)
    check("all_reduce " + name, t, ref(every))
ti = torch.arange(5, dtype=torch.int64, device=dev) + rank * 1000
dist.all_reduce(ti)
check("all_reduce SUM int64", ti, sum(torch.arange(5) + r * 1000 for r in range(world)), exact=True)
try:
    t = data(rank).to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce PREMUL_SUM 0.5", t, sum(every) * 0.5)
except (AttributeError, RuntimeError) as e:
    print("rank %d all_reduce PREMUL_SUM: %s" % (rank, e))
    failures.append("PREMUL_SUM")

out = torch.empty(6 * world, device=dev)
dist.all_gather_into_tensor(out, data(rank).to(dev))
check("all_gather_into_tensor", out, torch.cat(every))
outs = [torch.empty(6, device=dev) for _ in range(world)]
dist.all_gather(outs, data(rank).to(dev))
check("all_gather (list)", torch.cat(outs), torch.cat(every))

full = [data(r, 6 * world) for r in range(world)]
o = torch.empty(6, device=dev)
dist.reduce_scatter_tensor(o, full[rank].to(dev))
check("reduce_scatter_tensor SUM", o, sum(full).chunk(world)[rank])
dist.reduce_scatter_tensor(o, full[rank].to(dev), op=dist.ReduceOp.AVG)
check("reduce_scatter_tensor AVG", o, (sum(full) / world).chunk(world)[rank])
o = torch.empty(6, device=dev)
dist.reduce_scatter(o, [c.to(dev) for c in full[rank].chunk(world)])
check("reduce_scatter (list)", o, sum(full).chunk(world)[rank])

t = data(rank).to(dev)
dist.broadcast(t, src=2)
check("broadcast src=2", t, every[2])
t = data(rank).to(dev)
dist.reduce(t, dst=1)
check("reduce dst=1", t, sum(every) if rank == 1 else every[rank])

inp = torch.arange(world * 2, dtype=torch.float32, device=dev) + 100 * rank
o = torch.empty_like(inp)
dist.all_to_all_single(o, inp)
want = torch.cat([(torch.arange(world * 2, dtype=torch.float32) + 100 * r)[2 * rank:2 * rank + 2]
                  for r in range(world)])
check("all_to_all_single", o, want)
ins = [torch.full((r + 1,), float(rank * 10 + r), device=dev) for r in range(world)]
outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
dist.all_to_all(outs, ins)
check("all_to_all (list)", torch.cat(outs),
      torch.cat([torch.full((rank + 1,), float(r * 10 + rank)) for r in range(world)]))

dist.barrier()
check("barrier", torch.ones(1), torch.ones(1))

# Point to point: a ring, both ways, with isend/irecv and batch_isend_irecv.
right, left = (rank + 1) % world, (rank - 1) % world
send = data(rank, 1 << 16).to(dev)
recv = torch.empty_like(send)
ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
check("batch_isend_irecv ring", recv, data(left, 1 << 16))
if rank % 2 == 0:
    dist.send(send, right)
    dist.recv(recv, left)
else:
    dist.recv(recv, left)
    dist.send(send, right)
check("send/recv ring", recv, data(left, 1 << 16))

# Coalesced forms.
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

# Sub-groups: new_group, and a 2x2 DeviceMesh (HSDP's shape).
if world % 2 == 0:
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    odds = dist.new_group([r for r in range(world) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mine)
    check("all_reduce on new_group", t, sum(every[r] for r in range(world) if r % 2 == rank % 2))
if world == 4:
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"))
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mesh.get_group("shard"))
    peers = [r for r in range(world) if r // 2 == rank // 2]
    check("all_reduce on DeviceMesh shard dim", t, sum(every[r] for r in peers))
    t = data(rank).to(dev)
    dist.all_reduce(t, group=mesh.get_group("replicate"))
    peers = [r for r in range(world) if r % 2 == rank % 2]
    check("all_reduce on DeviceMesh replicate dim", t, sum(every[r] for r in peers))

# The stream semantics: the collective runs on its own stream, after what the caller's stream
# had issued, and the caller's stream waits for it at work.wait().
x = torch.zeros(1 << 20, device=dev)
torch.cuda._sleep(50_000_000)  # the caller's stream is busy when the collective is issued
x.fill_(rank + 1.0)
w = dist.all_reduce(x, async_op=True)
w.wait()
check("all_reduce after a busy stream, then wait", x[:4], torch.full((4,), float(sum(range(1, world + 1)))))
print("rank %d: %d wrong" % (rank, len(failures)), flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
