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


def lock_handover():
    import threading
    lock = threading.Lock()
    box = []

    def make():
        with lock:
            box.append(torch.full((4,), 2.0))  # line 57

    t = threading.Thread(target=make)
    t.start()
    while True:
        with lock:  # line 62: the acquire that finds the tensor waits for make's release
            if box:
                break
    box[0].add_(1)  # line 65
    t.join()


def condition_handover():
    import threading
    cond = threading.Condition()
    box = []

    def make():
        with cond:
            box.append(torch.full((4,), 2.0))  # line 76
            cond.notify()

    t = threading.Thread(target=make)
    with cond:
        t.start()
        cond.wait_for(lambda: box)  # line 82
    box[0].add_(1)  # line 83
    t.join()


def simple_queue_handover():
    import queue
    import threading
    q = queue.SimpleQueue()
    t = threading.Thread(target=lambda: q.put(torch.full((4,), 2.0)))  # line 91
    t.start()
    q.get().add_(1)  # line 93
    t.join()


def priority_queue_handover():
    import queue
    import threading
    q = queue.PriorityQueue()
    go = threading.Semaphore(0)

    def make():
        q.put((2, torch.full((4,), 2.0)))  # line 104
        q.put((1, torch.full((4,), 1.0)))  # line 105
        go.release()

    t = threading.Thread(target=make)
    t.start()
    go.acquire()  # line 110
    q.get()[1].add_(1)  # line 111: the item put at line 105
    t.join()


def barrier_handover():
    import threading
    box = [None, None]
    gate = threading.Barrier(2)

    def make():
        box[1] = torch.full((4,), 2.0)  # line 121
        gate.wait()

    t = threading.Thread(target=make)
    t.start()
    box[0] = torch.ones(4)
    gate.wait()  # line 127: through once both arrived
    box[1].add_(box[0])  # line 128
    t.join()


def every_handover():
    """Threads handing tensors over through every kind of handover at once, and a backward on
    a thread: captured without a hang, and clean."""
    import concurrent.futures
    import queue
    import threading
    model = torch.nn.Linear(8, 1)
    lock, cond = threading.Lock(), threading.Condition()
    sq, pq = queue.SimpleQueue(), queue.PriorityQueue()
    sem, bar = threading.BoundedSemaphore(2), threading.Barrier(3)

    def worker(i):
        with sem:
            with lock:
                t = torch.full((4,), float(i))
            sq.put(t)
            pq.put((i, t.clone()))
        bar.wait()

    def train():
        model(torch.randn(4, 8)).sum().backward()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    threads.append(threading.Thread(target=train))
    for t in threads:
        t.start()
    bar.wait()
    got = [sq.get() for _ in range(2)] + [pq.get()[1] for _ in range(2)]
    with cond:
        cond.notify_all()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        doubled = list(pool.map(lambda g: g * 2, got))
    for t in threads:
        t.join()
    return sum(d.sum() for d in doubled)


def polled_future():
    import time
    from concurrent.futures import ThreadPoolExecutor
    box = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(lambda: box.append(torch.full((4,), 2.0)))  # line 174
        while not future.done():  # line 175: polled until the task has ended
            time.sleep(0.001)
        box[0].add_(1)  # line 177


def waited_futures():
    import concurrent.futures
    box = {}

    def make(i):
        box[i] = torch.full((4,), float(i))  # line 185

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        concurrent.futures.wait([pool.submit(make, i) for i in range(2)])
        box[0].add_(box[1])  # line 189
        late = pool.submit(lambda: box.setdefault(2, torch.ones(4)))  # line 190
        for _ in concurrent.futures.as_completed([late]):
            box[2].add_(1)  # line 192


def copy_off_device():
    src = torch.ones(4)  # line 196
    dst = torch.empty(4, device="meta")  # memory of a device the capture does not record
    dst.copy_(src)  # line 198: still a read of src (a gradient copied into pinned host memory)


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        x = torch.full((4,), float(i))
        for _ in range(3000):  # a worker's records would overflow the writer's 1 MiB buffer
            x = x * 1.0 + 0.0
        return x


def forked_loader():
    model = torch.nn.Linear(4, 1)
    loader = torch.utils.data.DataLoader(_Squares(), batch_size=4, num_workers=2,
                                         multiprocessing_context="fork")
    for batch in loader:
        model(batch).sum().backward()
