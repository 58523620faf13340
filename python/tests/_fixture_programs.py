"""Programs that two hand-written fixtures of tests/capture/fixtures describe, runnable on CPU
over gloo for their ground truth (tests/capture/fixtures/README.md); test_example_truth.py runs
them uncaptured, at 2 ranks, as it runs the examples.

--case mismatch-dtype   rank 0 all-reduces 1024 float32 values, rank 1 the same 4096 bytes as
                        2048 16-bit floats. The fixture's records say bfloat16 on NCCL; gloo in
                        torch 1.13 has no bfloat16 sum ("Invalid scalar type"), so float16 here:
                        the same bytes, the same element size. --fix: float32 on both ranks.
                        Each rank prints the values it holds after, and the sum it meant.
--case p2p-deadlock     each rank dist.send()s 256 float32 values to the other, then dist.recv()s
                        (blocking): a send completes only once its peer posts the receive, which
                        the peer reaches only after its own send, so neither returns.
                        --batch: the same exchange as one dist.batch_isend_irecv (the fixture
                        p2p-batch); each rank prints what it received and what its peer sent.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 \\
        python3 python/tests/_fixture_programs.py --case mismatch-dtype
"""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "pytorch"))

from _launch import finish, init  # noqa: E402

FIX = "--fix" in sys.argv


def mismatch_dtype(rank: int) -> None:
    if rank == 0 or FIX:
        grad = torch.full((1024,), 1.0 + rank)
    else:
        grad = torch.full((2048,), 1.0 + rank, dtype=torch.float16)  # the same 4096 bytes
    dist.all_reduce(grad)
    print("rank %d: %s values %s, the sum meant %.1f" % (rank, str(grad.dtype)[6:], sorted(set(grad.tolist())),
                                                         1.0 + 2.0), flush=True)


def p2p_deadlock(rank: int) -> None:
    peer = 1 - rank
    act = torch.full((256,), float(rank + 1))
    got = torch.zeros(256)
    if "--batch" in sys.argv:
        for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, act, peer),
                                            dist.P2POp(dist.irecv, got, peer)]):
            work.wait()
    else:
        dist.send(act, peer)  # both ranks send first
        dist.recv(got, peer)
    print("rank %d: received %s, its peer sent %s" % (rank, sorted(set(got.tolist())), [float(peer + 1)]),
          flush=True)


def main() -> None:
    rank, world = init()
    assert world == 2, "run with 2 ranks"
    case = sys.argv[sys.argv.index("--case") + 1] if "--case" in sys.argv else ""
    cases = {"mismatch-dtype": mismatch_dtype, "p2p-deadlock": p2p_deadlock}
    if case not in cases:
        sys.exit("--case must be one of: " + ", ".join(cases))
    cases[case](rank)
    finish()


if __name__ == "__main__":
    main()
