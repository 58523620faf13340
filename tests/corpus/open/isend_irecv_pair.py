"""Two ranks post an irecv and an isend to each other in one batch, as PyTorch's
test_batch_isend_irecv_gloo does; the program finishes over gloo, every recv getting its peer's
tensor. The checker calls it a deadlock: each rank's recv waits for the other's send, which
it models as issued only after that rank's own recv."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
peer = 1 - rank
got = torch.full((4,), -1.0)
sent = torch.full((4,), float(rank))
reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, peer), dist.P2POp(dist.isend, sent, peer)])
for req in reqs:
    req.wait()
assert got.eq(peer).all(), got
