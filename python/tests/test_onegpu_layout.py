"""The one-GPU backend's collectives, run on CPU tensors against references: what each rank
copies into its slot in each round, and what it computes from the slots, with slots small
enough that every collective takes several rounds.

The rounds of N ranks are played in lockstep (every rank publishes round k, then every rank
consumes it), as the counters order them on the GPU; point to point messages are matched in
order per pair. The stream protocol itself (the counters, CUDA IPC) needs a GPU: it runs in
tests/onegpu/collectives.py on the H200."""

import unittest

try:
    import torch
    import torch.distributed as dist
    from shardcheck.capture import hooks, onegpu
    HAVE = dist.is_available()
except ImportError:
    HAVE = False

N = 4


class _Rounds:
    def __init__(self):
        self.log = []

    def round(self, stream, publish=None, consume=None):
        self.log.append((publish, consume))


class _Pipes:
    """Point to point between the simulated ranks: messages sent, receives posted, per pair."""

    def __init__(self):
        self.sent, self.posted = {}, {}

    def for_rank(self, me):
        pipes = self

        class Pipe:
            def __init__(self, peer):
                self.peer = peer

            def send(self, stream, publish):
                slot = torch.zeros(onegpu.PIPE_BYTES, dtype=torch.uint8)
                publish(slot)
                pipes.sent.setdefault((me, self.peer), []).append(slot)

            def recv(self, stream, consume):
                pipes.posted.setdefault((self.peer, me), []).append(consume)

        return lambda peers: {p: Pipe(p) for p in range(N)}

    def deliver(self, test):
        for key, consumes in self.posted.items():
            slots = self.sent.get(key, [])
            test.assertEqual(len(slots), len(consumes), "messages on %s" % (key,))
            for slot, consume in zip(slots, consumes):
                consume(slot)


@unittest.skipUnless(HAVE, "needs torch with torch.distributed")
class LayoutTest(unittest.TestCase):
    def setUp(self):
        self._sizes = onegpu.SLOT_BYTES, onegpu.PIPE_BYTES
        onegpu.SLOT_BYTES, onegpu.PIPE_BYTES = 96, 40  # several rounds for every tensor here
        self.pipes = _Pipes()
        self.groups = []
        self.jobs = []
        for r in range(N):
            g = onegpu.OneGpuGroup(None, r, N, None)
            g._rounds = _Rounds()
            g._pipes_to = self.pipes.for_rank(r)
            jobs = []
            g._launch = g._issue_host = (lambda parts, *a, jobs=jobs, **k: jobs.append(parts))
            self.groups.append(g)
            self.jobs.append(jobs)

    def tearDown(self):
        onegpu.SLOT_BYTES, onegpu.PIPE_BYTES = self._sizes

    def play(self, call):
        """call(group, rank) on every rank, then the rounds and messages it enqueued."""
        for r, g in enumerate(self.groups):
            call(g, r)
        for r, g in enumerate(self.groups):
            for parts in self.jobs[r]:
                onegpu._enqueue(parts, None)
            self.jobs[r].clear()
        logs = [g._rounds.log for g in self.groups]
        self.assertEqual(len({len(log) for log in logs}), 1, "every rank plays as many rounds")
        slots = [torch.zeros(onegpu.SLOT_BYTES, dtype=torch.uint8) for _ in range(N)]
        for k in range(len(logs[0])):
            for r in range(N):
                if logs[r][k][0] is not None:
                    logs[r][k][0](slots[r])
            for r in range(N):
                if logs[r][k][1] is not None:
                    logs[r][k][1](slots)
        for log in logs:
            log.clear()
        self.pipes.deliver(self)
        self.pipes.sent.clear()
        self.pipes.posted.clear()

    @staticmethod
    def data(r, n, dtype=torch.float32):
        return (torch.arange(n, dtype=torch.float64) % 13 * (r + 1) + r).to(dtype)

    def test_all_reduce_every_op(self):
        n = 37
        refs = {"SUM": lambda xs: sum(xs), "AVG": lambda xs: sum(xs) / N,
                "PRODUCT": lambda xs: torch.stack(xs).prod(0),
                "MIN": lambda xs: torch.stack(xs).min(0).values,
                "MAX": lambda xs: torch.stack(xs).max(0).values}
        for name, ref in refs.items():
            ts = [self.data(r, n) for r in range(N)]
            want = ref([t.clone() for t in ts])

            def call(g, r, name=name, ts=ts):
                o = dist.AllreduceOptions()
                o.reduceOp = getattr(dist.ReduceOp, name)
                g.allreduce([ts[r]], o)
            self.play(call)
            for t in ts:
                self.assertTrue(torch.allclose(t, want), name)

    def test_integer_and_bool_reductions_are_exact(self):
        ts = [torch.tensor([1 << r, 3, -r], dtype=torch.int64) for r in range(N)]

        def call(g, r):
            o = dist.AllreduceOptions()
            o.reduceOp = dist.ReduceOp.BOR
            g.allreduce([ts[r]], o)
        self.play(call)
        for t in ts:
            self.assertEqual(t.tolist(), [(1 << N) - 1, 3, 0 | -1 | -2 | -3])
        bs = [torch.tensor([r == 0, False, True]) for r in range(N)]
        self.play(lambda g, r: g.allreduce([bs[r]], dist.AllreduceOptions()))
        for b in bs:
            self.assertEqual(b.tolist(), [True, False, True])

    def test_premul_sum_reads_the_factor_torch_keeps(self):
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is None:
            self.skipTest("this torch has no PREMUL_SUM")
        ts = [self.data(r, 9) for r in range(N)]
        want = sum(t.clone() for t in ts) * 0.25

        def call(g, r):
            op = make(0.25)
            onegpu._remember_premul(op, 0.25)  # as install()'s _make_nccl_premul_sum does
            o = dist.AllreduceOptions()
            o.reduceOp = op
            with hooks.reduce_op(op):  # as the capture's dist.all_reduce does
                g.allreduce([ts[r]], o)
        self.play(call)
        for t in ts:
            self.assertTrue(torch.allclose(t, want))

    def test_broadcast_and_reduce(self):
        ts = [self.data(r, 50) for r in range(N)]
        root_data = ts[2].clone()

        def call(g, r):
            o = dist.BroadcastOptions()
            o.rootRank = 2
            g.broadcast([ts[r]], o)
        self.play(call)
        for t in ts:
            self.assertTrue(torch.equal(t, root_data))
        ts = [self.data(r, 50) for r in range(N)]
        before = [t.clone() for t in ts]

        def reduce(g, r):
            o = dist.ReduceOptions()
            o.rootRank, o.reduceOp = 1, dist.ReduceOp.SUM
            g.reduce([ts[r]], o)
        self.play(reduce)
        self.assertTrue(torch.allclose(ts[1], sum(before)))
        for r in (0, 2, 3):
            self.assertTrue(torch.equal(ts[r], before[r]))

    def test_all_gather_both_forms(self):
        n = 29
        ins = [self.data(r, n) for r in range(N)]
        outs = [torch.empty(N * n) for _ in range(N)]
        self.play(lambda g, r: g._allgather_base(outs[r], ins[r]))
        for o in outs:
            self.assertTrue(torch.equal(o, torch.cat(ins)))
        lists = [[torch.empty(n) for _ in range(N)] for _ in range(N)]
        self.play(lambda g, r: g.allgather([lists[r]], [ins[r]]))
        for lst in lists:
            self.assertTrue(torch.equal(torch.cat(lst), torch.cat(ins)))

    def test_reduce_scatter_both_forms(self):
        m = 23
        ins = [self.data(r, N * m) for r in range(N)]
        for name in ("SUM", "AVG"):
            outs = [torch.empty(m) for _ in range(N)]

            def call(g, r, name=name, outs=outs):
                o = dist.ReduceScatterOptions()
                o.reduceOp = getattr(dist.ReduceOp, name)
                g._reduce_scatter_base(outs[r], ins[r], o)
            self.play(call)
            total = sum(ins) / (N if name == "AVG" else 1)
            for r, o in enumerate(outs):
                self.assertTrue(torch.allclose(o, total.chunk(N)[r]), name)
        outs = [torch.empty(m) for _ in range(N)]
        self.play(lambda g, r: g.reduce_scatter([outs[r]], [list(ins[r].chunk(N))],
                                                dist.ReduceScatterOptions()))
        for r, o in enumerate(outs):
            self.assertTrue(torch.allclose(o, sum(ins).chunk(N)[r]))

    def test_all_to_all_even_uneven_and_list(self):
        ins = [torch.arange(N * 6, dtype=torch.float32) + 100 * r for r in range(N)]
        outs = [torch.empty(N * 6) for _ in range(N)]
        self.play(lambda g, r: g.alltoall_base(outs[r], ins[r], [], []))
        for r, o in enumerate(outs):
            want = torch.cat([ins[p][6 * r:6 * r + 6] for p in range(N)])
            self.assertTrue(torch.equal(o, want))
        # Rank p sends q+1 rows of width 3 to rank q.
        ins = [torch.cat([torch.full((q + 1, 3), float(p * 10 + q)) for q in range(N)])
               for p in range(N)]
        outs = [torch.empty(N * (r + 1), 3) for r in range(N)]
        self.play(lambda g, r: g.alltoall_base(outs[r], ins[r], [r + 1] * N,
                                               [q + 1 for q in range(N)]))
        for r, o in enumerate(outs):
            want = torch.cat([torch.full((r + 1, 3), float(p * 10 + r)) for p in range(N)])
            self.assertTrue(torch.equal(o, want))
        lins = [[torch.full((q + 7,), float(p * 10 + q)) for q in range(N)] for p in range(N)]
        louts = [[torch.empty(r + 7) for _ in range(N)] for r in range(N)]
        self.play(lambda g, r: g.alltoall(louts[r], lins[r]))
        for r, lst in enumerate(louts):
            for p, t in enumerate(lst):
                self.assertTrue(torch.equal(t, torch.full((r + 7,), float(p * 10 + r))))

    def test_gather_and_scatter(self):
        ins = [self.data(r, 21) for r in range(N)]
        outs = [torch.empty(21) for _ in range(N)]

        def gather(g, r):
            o = dist.GatherOptions()
            o.rootRank = 0
            g.gather([outs] if r == 0 else [], [ins[r]], o)
        self.play(gather)
        for r in range(N):
            self.assertTrue(torch.equal(outs[r], ins[r]))
        got = [torch.empty(21) for _ in range(N)]

        def scatter(g, r):
            o = dist.ScatterOptions()
            o.rootRank = 3
            g.scatter([got[r]], [ins] if r == 3 else [], o)
        self.play(scatter)
        for r in range(N):
            self.assertTrue(torch.equal(got[r], ins[r]))

    def test_point_to_point_and_a_coalesced_batch(self):
        n = 33  # 132 bytes: four messages through 40-byte pipe slots
        sends = [self.data(r, n) for r in range(N)]
        recvs = [torch.empty(n) for _ in range(N)]

        def ring(g, r):
            g._start_coalescing(None)
            g.send([sends[r]], (r + 1) % N)
            g.recv([recvs[r]], (r - 1) % N)
            g._end_coalescing(None)
        self.play(ring)
        for r in range(N):
            self.assertTrue(torch.equal(recvs[r], sends[(r - 1) % N]))
        self.assertEqual(len(self.jobs[0]), 0)

        def pairs(g, r):
            g.send([sends[r]], r ^ 1)
            g.recv([recvs[r]], r ^ 1)
        self.play(pairs)
        for r in range(N):
            self.assertTrue(torch.equal(recvs[r], sends[r ^ 1]))

    def test_size_checks_raise_as_nccl_does(self):
        g = self.groups[0]
        with self.assertRaises(ValueError):
            g._allgather_base(torch.empty(5), torch.empty(2))
        with self.assertRaises(ValueError):
            g._reduce_scatter_base(torch.empty(2), torch.empty(5), dist.ReduceScatterOptions())
        with self.assertRaises(ValueError):
            g.allreduce([torch.empty(4, 4).t()], dist.AllreduceOptions())


if __name__ == "__main__":
    unittest.main()
