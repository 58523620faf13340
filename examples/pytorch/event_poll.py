"""A side stream's result read on the default stream, ordered (or not) by polling its event. A
loader stream fills a buffer behind a busy kernel and records an event; the main thread reads
the buffer on the default stream, which never waits for the loader stream. Without --fix it reads
straight away: a race. --fix first polls the event until it says the fill is done (`while not
ev.query()`), so the fill finished before the read was issued; --fix --stream polls the loader
stream (`loader.query()`). Ground truth (GPU only, no shardcheck): the program prints the sum it
read and the one it should have; Event.query's documented semantics; the runs to make are in
examples/pytorch/README.md.
"""

import sys
import time

import torch

from _launch import finish, init

FIX = "--fix" in sys.argv
STREAM = "--stream" in sys.argv


def main():
    rank, world = init()
    buf = torch.zeros(1 << 20, device="cuda")
    loader = torch.cuda.Stream()
    loader.wait_stream(torch.cuda.current_stream())  # buf's zeros are written
    with torch.cuda.stream(loader):
        torch.cuda._sleep(50_000_000)  # the loader stream is busy for a while
        buf.fill_(float(rank + 1))  # the batch lands in buf
    done = torch.cuda.Event()
    done.record(loader)
    if FIX:
        while not (loader.query() if STREAM else done.query()):
            time.sleep(0.001)  # overlap host work here
    total = buf.sum()  # the default stream reads buf
    print("rank %d: sum %.0f (want %.0f)" % (rank, total.item(), (rank + 1) * buf.numel()),
          flush=True)
    finish()


if __name__ == "__main__":
    main()
