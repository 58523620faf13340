"""Small programs the tests capture (their line numbers are asserted: keep them in place)."""

import torch


def views_and_inplace():
    a = torch.ones(8)  # line 7
    b = a * 2  # line 8
    c = b.view(2, 4)  # line 9: a view touches nothing
    c[1].add_(1)  # line 10: reads and writes bytes 16..32 of b
    c.t().contiguous()  # line 11: a strided read of all of b
    return b.sum().item()  # line 12


def prefetch_thread():
    import queue
    import threading
    q = queue.Queue()

    def load():
        for i in range(2):
            q.put(torch.full((4,), float(i)))  # line 22
        q.put(None)

    t = threading.Thread(target=load, name="loader")  # line 25
    t.start()
    total = torch.zeros(4)
    while (batch := q.get()) is not None:  # line 28
        total.add_(batch)  # line 29
    t.join()  # line 30
    return total


def dropped_storage():
    a = torch.ones(256)  # line 35
    b = a * 2  # line 36
    del a  # line 37: its storage is freed here; no allocator callback says so on CPU
    return b + 1  # line 38


def pool_prefetch():
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(torch.full, (4,), 3.0)  # line 44
        total = torch.zeros(4)  # line 45
        total.add_(future.result())  # line 46
    return total
