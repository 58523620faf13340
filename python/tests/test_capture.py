"""Tests of the capture package that run wherever torch runs (CPU is enough)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
sys.path.insert(0, PYROOT)

from shardcheck.capture.recorder import Recorder  # noqa: E402
from shardcheck.capture.writer import Writer  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise  # `make test` installs python3-torch: its absence is a broken install
    HAVE_TORCH = False


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def records(path, kind):
    return [r for r in read(path)[1:] if r.get("k") == kind]


def ranges_outside_their_buffers(path):
    """Every range of the file that reaches past its live buffer's allocation (the checker
    refuses such a file as bad input): [] for a file it takes."""
    size, bad = {}, []
    for r in read(path)[1:]:
        k = r.get("k")
        if k == "alloc":
            size[r["buf"]] = r["bytes"]
        elif k == "free":
            size.pop(r["buf"], None)
        spans = r.get("r", []) + r.get("w", []) if k == "op" else \
            [r[x] for x in ("in", "out", "buf") if isinstance(r.get(x), list)]
        for buf, off, n in spans:
            if buf not in size or off + n > size[buf]:
                bad.append((k, r.get("name"), [buf, off, n], size.get(buf)))
    return bad


class WriterTest(unittest.TestCase):
    def test_header_and_end_count_records(self):
        with tempfile.TemporaryDirectory() as d:
            w = Writer(os.path.join(d, "r.jsonl"), {"rank": 0, "world_size": 1})
            w.write({"k": "device_sync", "at": 0})
            w.write({"k": "device_sync", "at": 0})
            w.close()
            lines = read(os.path.join(d, "r.jsonl"))
            self.assertEqual(lines[0]["shardcheck_capture"], 2)
            self.assertEqual(lines[-1], {"k": "end", "records": 2})

    def test_abandoned_file_has_no_end(self):
        with tempfile.TemporaryDirectory() as d:
            w = Writer(os.path.join(d, "r.jsonl"), {"rank": 0, "world_size": 1})
            w.write({"k": "device_sync", "at": 0})
            w.abandon()
            self.assertNotEqual(read(os.path.join(d, "r.jsonl"))[-1]["k"], "end")

    def test_names_stay_ascii_json(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "r.jsonl")
            w = Writer(p, {"rank": 0, "world_size": 1})
            w.write({"k": "site", "id": 0, "file": "tr\u00e4in\x1b.py", "line": 1, "func": "f"})
            w.close()
            with open(p, "rb") as f:
                raw = f.read()
            self.assertTrue(all(b < 0x80 for b in raw))
            # The checker refuses control characters in names: ESC is written as its escape.
            self.assertEqual(read(p)[1]["file"], "tr\u00e4in\\x1b.py")


class RecorderTest(unittest.TestCase):
    """The #6137 sequence driven by hand, as the hooks would on a GPU."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "rank-0.jsonl")
        self.rec = Recorder(self.path, {"rank": 0, "world_size": 1})
        self.site = self.rec.site("train.py", 10, "step")

    def tearDown(self):
        self.dir.cleanup()

    def test_allocation_is_written_at_first_use_with_its_stream(self):
        side = 0x77
        self.rec.on_alloc(0x1000, side, self.site)
        self.rec.op("aten::mul", side, [], [(0x1000, 4096, 0, 4096)], self.site)
        self.rec.close()
        alloc = records(self.path, "alloc")[0]
        stream = [r for r in records(self.path, "stream") if r["id"] == alloc["stream"]][0]
        self.assertEqual((alloc["bytes"], stream["name"]), (4096, "stream 1"))
        self.assertNotIn("pre", alloc)
        self.assertEqual(records(self.path, "op")[0]["w"], [[alloc["buf"], 0, 4096]])

    def test_a_reused_pointer_is_a_new_lifetime(self):
        self.rec.on_alloc(0x1000, 0, self.site)
        self.rec.op("aten::fill_", 0, [], [(0x1000, 4096, 0, 4096)], self.site)
        self.rec.on_free(0x1000, self.site)
        self.rec.on_alloc(0x1000, 0, self.site)
        self.rec.op("aten::fill_", 0, [], [(0x1000, 4096, 0, 4096)], self.site)
        self.rec.close()
        allocs = records(self.path, "alloc")
        self.assertEqual([a["buf"] for a in allocs], [0, 1])
        self.assertEqual(records(self.path, "free"), [{"k": "free", "buf": 0, "at": self.site}])

    def test_a_storage_that_grew_in_place_is_a_larger_lifetime_holding_its_bytes(self):
        # resize_ within its block (CUDA: every free is seen, so no free came between).
        self.rec.on_alloc(0x1000, 0, self.site)
        self.rec.op("aten::fill_", 0, [], [(0x1000, 512, 0, 512)], self.site)
        self.rec.op("aten::mm", 0, [(0x1000, 1024, 0, 512)], [(0x1000, 1024, 0, 1024)], self.site)
        self.rec.close()
        allocs = records(self.path, "alloc")
        self.assertEqual([(a["buf"], a["bytes"]) for a in allocs], [(0, 512), (1, 1024)])
        ops = records(self.path, "op")
        self.assertEqual([o["name"] for o in ops], ["aten::fill_", "aten::resize_", "aten::mm"])
        self.assertEqual((ops[1]["r"], ops[1]["w"]), ([[0, 0, 512]], [[1, 0, 512]]))
        # The operator's read and write both name the new lifetime, which covers them.
        self.assertEqual((ops[2]["r"], ops[2]["w"]), ([[1, 0, 512]], [[1, 0, 1024]]))
        self.assertEqual([f["buf"] for f in records(self.path, "free")], [0])

    def test_each_allocation_carries_its_device_address(self):
        # The checker places lifetimes where the allocator put them (docs/capture-format.md).
        self.rec.on_alloc(0x7f3a40400000, 0, self.site)
        self.rec.op("aten::fill_", 0, [], [(0x7f3a40400000, 4096, 0, 4096)], self.site)
        self.rec.op("aten::add_", 0, [(0x2000, 64, 0, 64)], [(0x2000, 64, 0, 64)], self.site)
        self.rec.close()
        self.assertEqual([(a["buf"], a["addr"]) for a in records(self.path, "alloc")],
                         [(0, 0x7f3a40400000), (1, 0x2000)])
        # A CPU storage's address is no caching allocator's block: none is written.
        path = os.path.join(self.dir.name, "rank-1.jsonl")
        rec = Recorder(path, {"rank": 1, "world_size": 2}, sees_frees=False)
        rec.op("aten::fill_", 0, [], [(0x1000, 512, 0, 512)], rec.site("dp.py", 7, "main"))
        rec.close()
        self.assertNotIn("addr", records(path, "alloc")[0])

    def test_a_cuda_graph_runs_its_kernels_at_each_replay_not_at_capture(self):
        graph_line = self.rec.site("graph.py", 12, "main")
        replay_line = self.rec.site("graph.py", 20, "main")
        x, tmp, y = 0x7f0000000000, 0x7f0000100000, 0x7f0000200000
        capture, side = 5, 6
        self.rec.stream_names[side] = "stream from graph.py:9"
        self.rec.op("aten::fill_", 0, [], [(x, 4096, 0, 4096)], self.site)  # a static input
        self.rec.graph_begin(capture)
        self.rec.on_alloc(tmp, capture, graph_line)
        self.rec.op("aten::mul", capture, [(x, 4096, 0, 4096)], [(tmp, 4096, 0, 4096)], graph_line)
        self.rec.event_record(0x99, capture, graph_line)  # the fork to the side stream
        self.rec.event_wait(0x99, side, graph_line)
        self.rec.on_alloc(y, side, graph_line)
        self.rec.op("aten::add", side, [(tmp, 4096, 0, 4096)], [(y, 4096, 0, 4096)], graph_line)
        self.rec.event_record(0x98, side, graph_line)  # and the join back
        self.rec.event_wait(0x98, capture, graph_line)
        self.rec.on_free(tmp, graph_line)  # a temporary, back in the graph's pool
        self.rec.graph_end(1)
        self.assertEqual(records(self.path, "op"), [])  # nothing has run yet
        self.assertEqual(records(self.path, "event_record"), [])
        self.rec.graph_replay(1, 0, replay_line)
        self.rec.graph_replay(1, 0, replay_line)
        self.rec.close()
        streams = {r["id"]: r["name"] for r in records(self.path, "stream")}
        g = [i for i, n in streams.items() if "of the graph" in n]
        self.assertEqual([streams[i] for i in g],
                         ["stream from graph.py:9 of the graph replayed at graph.py:20"])
        g = g[0]
        work = [(r["k"], r.get("name", r.get("event")), r["stream"]) for r in read(self.path)[1:]
                if r["k"] in ("op", "event_record", "event_wait") and r["at"] == replay_line]
        once = [("op", "aten::mul", 0), ("event_record", 0, 0), ("event_wait", 0, g),
                ("op", "aten::add", g), ("event_record", 1, g), ("event_wait", 1, 0)]
        self.assertEqual(work, once * 2)
        # The temporary is the graph's own memory: its reads and writes are left out.
        ops = records(self.path, "op")
        bufs = {a["addr"]: a["buf"] for a in records(self.path, "alloc")}
        self.assertEqual((ops[1]["r"], ops[1]["w"]), ([[bufs[x], 0, 4096]], []))
        self.assertEqual((ops[2]["r"], ops[2]["w"]), ([], [[bufs[y], 0, 4096]]))

    def test_a_worker_threads_waits_order_the_program_only_once_it_waits_for_that_work(self):
        # gloo on CUDA tensors: the caller's stream is copied out on gloo's stream; gloo's
        # worker thread waits for that copy (on its own host timeline), reduces on the CPU,
        # writes back on gloo's stream and records an event that work.wait() makes the caller
        # wait for.
        caller, gloo = 0, 0x51
        who = [None]
        self.rec.thread_of = lambda: who[0]
        update = self.rec.site("train.py", 30, "step")
        wait = self.rec.site("train.py", 32, "step")
        self.rec.event_record(0xa, caller, self.site)
        self.rec.event_wait(0xa, gloo, self.site)
        who[0] = (("worker", 777), "backend worker", None)
        self.rec.event_sync(0xa, self.site)  # the worker waits for the copy-out
        self.rec.event_record(0xb, gloo, self.site, worker=True)
        self.rec.event_wait(0xb, caller, self.site, worker=True)  # the worker's own: joins nothing
        who[0] = None
        self.rec.op("aten::add_", caller, [], [(0x1000, 64, 0, 64)], update)  # not ordered by it
        self.rec.event_wait(0xb, caller, wait)  # work.wait(): the program has waited for the worker
        self.rec.close()
        got = [(r["k"], r.get("id", r.get("signal")), r.get("at")) for r in read(self.path)[1:]
               if r["k"] not in ("site", "stream", "alloc", "end")]
        self.assertEqual(got, [
            ("event_record", None, self.site), ("event_wait", None, self.site),
            ("thread", 1, None), ("event_sync", None, self.site),
            ("event_record", None, self.site), ("host_signal", 0, self.site),
            ("event_wait", None, self.site),
            ("thread", 0, None), ("op", None, update),
            ("host_wait", 0, wait), ("event_wait", None, wait)])
        self.assertEqual(records(self.path, "thread")[0]["name"], "backend worker")

    def test_a_thread_the_program_starts_waits_for_its_start_when_it_first_writes(self):
        who = [None]
        self.rec.thread_of = lambda: who[0]
        start = self.rec.site("train.py", 5, "main")
        sid = self.rec.signal(start)
        who[0] = (("thread", 1), "loader", (sid, start))
        self.rec.op("aten::fill_", 0, [], [(0x1000, 64, 0, 64)], self.site)
        put = self.rec.signal(self.site)
        who[0] = None
        self.rec.wait_signal(put, start)
        self.rec.wait_signal(None, start)  # nothing to wait for: nothing written
        self.rec.close()
        got = [(r["k"], r.get("id", r.get("signal"))) for r in read(self.path)[1:]
               if r["k"] not in ("site", "stream", "alloc", "end")]
        self.assertEqual(got, [("host_signal", 0), ("thread", 1), ("host_wait", 0), ("op", None),
                               ("host_signal", 1), ("thread", 0), ("host_wait", 1)])

    def test_a_cpu_address_used_again_with_a_larger_size_is_a_new_storage(self):
        rec = Recorder(os.path.join(self.dir.name, "rank-1.jsonl"), {"rank": 1, "world_size": 2},
                       sees_frees=False)
        site = rec.site("dp.py", 7, "main")
        rec.op("aten::fill_", 0, [], [(0x1000, 512, 0, 512)], site)
        rec.op("aten::mm", 0, [], [(0x1000, 1024, 0, 1024)], site)
        rec.close()
        path = os.path.join(self.dir.name, "rank-1.jsonl")
        self.assertEqual([a["bytes"] for a in records(path, "alloc")], [512, 1024])
        self.assertEqual([o["name"] for o in records(path, "op")], ["aten::fill_", "aten::mm"])
        self.assertEqual(records(path, "op")[1]["w"], [[1, 0, 1024]])
        self.assertEqual([f["buf"] for f in records(path, "free")], [0])
        # The old storage's free comes before the new one's allocation at its address.
        order = [(r["k"], r["buf"]) for r in read(path)[1:] if r["k"] in ("alloc", "free")]
        self.assertEqual(order, [("alloc", 0), ("free", 0), ("alloc", 1)])

    def test_without_free_callbacks_a_storage_found_freed_is_freed_before_the_next_operator(self):
        # CPU, cudaMallocAsync: the storages' weak references tell when they were freed.
        class Refs:
            def __init__(self):
                self.dead, self.released = set(), []

            def expired(self, ref):
                return ref in self.dead

            def release(self, ref):
                self.released.append(ref)

        class Storage:
            def __init__(self, n, ref):
                self.n, self.ref = n, ref

            def __call__(self):
                return self.n

            def weak(self):
                return self.ref

        refs = Refs()
        path = os.path.join(self.dir.name, "rank-1.jsonl")
        rec = Recorder(path, {"rank": 1, "world_size": 2}, sees_frees=False, addresses=True,
                       storages=refs)
        made, later = rec.site("dp.py", 7, "main"), rec.site("dp.py", 9, "main")
        rec.op("aten::fill_", 0, [], [(0x1000, Storage(64, "a"), 0, 64)], made)
        rec.op("aten::fill_", 0, [], [(0x2000, Storage(64, "b"), 0, 64)], made)
        refs.dead.add("a")
        rec.op("aten::add_", 0, [(0x2000, Storage(64, "b"), 0, 64)],
               [(0x2000, Storage(64, "b"), 0, 64)], later)
        rec.close()
        got = [(r["k"], r.get("buf"), r.get("at") if r["k"] != "alloc" else None)
               for r in read(path)[1:] if r["k"] in ("alloc", "free", "op")]
        self.assertEqual(got, [("alloc", 0, None), ("op", None, made), ("alloc", 1, None),
                               ("op", None, made), ("free", 0, later), ("op", None, later)])
        self.assertEqual(refs.released, ["a"])

    def test_storage_seen_before_its_allocation_is_pre_existing(self):
        self.rec.op("aten::add_", 0, [(0x2000, 64, 0, 64)], [(0x2000, 64, 0, 64)], self.site)
        self.rec.close()
        self.assertTrue(records(self.path, "alloc")[0]["pre"])

    def test_allocation_never_used_writes_nothing(self):
        self.rec.on_alloc(0x3000, 0, self.site)
        self.rec.on_free(0x3000, self.site)
        self.rec.close()
        self.assertEqual(records(self.path, "alloc") + records(self.path, "free"), [])
        self.assertEqual(self.rec.stats["unseen_allocs"], 1)

    def test_watchdog_free_waits_for_the_collective_stream(self):
        nccl = 0x99
        self.rec.op("aten::fill_", 0, [], [(0x1000, 64, 0, 64)], self.site)
        gid = self.rec.group("world", "world", [0, 1])
        self.rec.collective("all_reduce", gid, nccl, (0x1000, 64, 0, 64), (0x1000, 64, 0, 64),
                            "f32", 16, "sum", 0, "c10d::allreduce_", self.site)
        self.rec.on_free(0x1000, self.site, background=True)
        self.rec.close()
        kinds = [r["k"] for r in read(self.path)[1:]]
        self.assertEqual(kinds[-3:], ["stream_sync", "free", "end"])
        sync = records(self.path, "stream_sync")[0]
        self.assertEqual(sync["stream"], records(self.path, "coll")[0]["stream"])

    def test_a_collective_says_where_its_tensor_was_made_and_which_of_that_line_it_is(self):
        site = self.rec.site("train.py", 20, "main")
        for ptr in (0x1000, 0x2000):  # two tensors allocated at one line, in a loop
            self.rec.on_alloc(ptr, 0, site)
            self.rec.op("aten::full", 0, [], [(ptr, 64, 0, 64)], site)
        gid = self.rec.group("world", "world", [0, 1])
        second = (0x2000, 64, 0, 64)
        self.rec.collective("all_reduce", gid, 0, second, second, "f32", 16, "sum", 0,
                            "c10d::allreduce_", self.site)
        self.rec.collective("broadcast", gid, 0, second, second, "f32", 16, "none", 0,
                            "c10d::broadcast_", self.site)
        self.rec.param_name = lambda ptr: "fc.weight" if ptr == 0x3000 else None
        before = (0x3000, 64, 0, 64)  # a parameter that existed before the capture
        self.rec.collective("all_reduce", gid, 0, before, before, "f32", 16, "sum", 0,
                            "c10d::allreduce_", self.site)
        self.rec.close()
        colls = records(self.path, "coll")
        self.assertEqual([c["name"] for c in colls], ["c10d::allreduce_", "c10d::broadcast_",
                                                      "c10d::allreduce_"])
        # the 2nd (from 0: 1) of the 2 buffers allocated at train.py:20 by then; a broadcast's
        # receivers make their tensors where its root does not: nothing said
        self.assertEqual(colls[0]["from"], [site, 1, 2])
        self.assertNotIn("from", colls[1])
        self.assertEqual(colls[2]["param"], "fc.weight")

    def test_a_list_form_writes_its_list_side_as_a_list_of_ranges(self):
        gid = self.rec.group("world", "world", [0, 1])
        inp, outs = (0x1000, 64, 0, 64), [(0x2000, 64, 0, 64), (0x3000, 64, 0, 64)]
        self.rec.collective("all_gather", gid, 0, inp, outs, "f32", 16, "none", 0,
                            "torch.distributed.all_gather", self.site)
        self.rec.close()
        coll = records(self.path, "coll")[0]
        self.assertEqual(len(coll["in"]), 3)  # one range
        self.assertEqual([len(r) for r in coll["out"]], [3, 3])  # a range per member

    def test_ids_are_defined_before_use(self):
        self.rec.on_alloc(0x1000, 5, self.site)
        self.rec.event_record(0xE, 5, self.site)
        self.rec.event_wait(0xE, 0, self.site)
        self.rec.op("aten::mul", 5, [], [(0x1000, 8, 0, 8)], self.site)
        self.rec.close()
        defined = {"site": set(), "stream": set()}
        for r in read(self.path)[1:]:
            if r["k"] in defined:
                defined[r["k"]].add(r["id"])
            if "at" in r:
                self.assertIn(r["at"], defined["site"])
            if "stream" in r and r["k"] != "stream":
                self.assertIn(r["stream"], defined["stream"])


_LIBRARIES = []


class WithoutTorchTest(unittest.TestCase):
    def test_a_python_without_torch_is_told_so_without_a_traceback(self):
        with tempfile.TemporaryDirectory() as d:
            # A torch that cannot be imported, ahead of any real one on the path.
            with open(os.path.join(d, "torch.py"), "w") as f:
                f.write("raise ImportError(\"No module named 'torch'\")\n")
            script = os.path.join(d, "prog.py")
            with open(script, "w") as f:
                f.write("print('ran')\n")
            p = subprocess.run([sys.executable, "-m", "shardcheck.capture", "--out",
                                os.path.join(d, "cap"), "--", script],
                               env=dict(os.environ, PYTHONPATH=d + os.pathsep + PYROOT),
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("cannot import torch", p.stderr)
            self.assertIn(sys.executable, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            self.assertNotIn("ran", p.stdout)



@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class TorchCpuTest(unittest.TestCase):
    def capture_program(self, d, name):
        """Captures _programs.<name>() on CPU into d: the rank file's path."""
        sys.path.insert(0, HERE)
        import _programs

        from shardcheck import capture
        with capture(d, device="cpu"):
            getattr(_programs, name)()
        return os.path.join(d, "rank-0.jsonl")

    def assert_checks_clean(self, d):
        """The checker, where SHARDCHECK_BIN names it, reads the capture in d and finds nothing."""
        shardcheck = os.environ.get("SHARDCHECK_BIN")
        if shardcheck:
            p = subprocess.run([shardcheck, "run", d], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_views_resolve_to_byte_ranges_and_sites_name_the_user_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "views_and_inplace")
            sites = {r["id"]: (os.path.basename(r["file"]), r["line"])
                     for r in records(path, "site")}
            ops = [(r["name"], sites[r["at"]][1], r["r"], r["w"]) for r in records(path, "op")]
            self.assertTrue(all(sites[r["at"]][0] == "_programs.py" for r in records(path, "op")))
            by_line = {}
            for name, line, r, w in ops:
                by_line.setdefault(line, []).append((name, r, w))
            self.assertEqual(by_line[7][0][0], "aten::ones")
            self.assertNotIn(9, by_line)  # the view
            name, r, w = by_line[10][0]
            self.assertEqual((name, r, w), ("aten::add_", [[1, 16, 16]], [[1, 16, 16]]))
            self.assertEqual(by_line[11][0][1], [[1, 0, 32]])
            self.assertEqual(read(path)[-1]["k"], "end")

    def test_sites_name_torchs_own_distributed_tests_not_torch(self):
        # torch's distributed tests live in torch's tree; their lines are the program's (every
        # record of PyTorch's DistributedTest was named "<string>:1", the spawn bootstrap),
        # while torch's library stays hidden behind them.
        import torch

        from shardcheck import capture
        from shardcheck.capture import hooks
        root = os.path.dirname(os.path.abspath(torch.__file__))
        test_file = os.path.join(root, "testing", "_internal", "distributed", "x_test.py")
        library = os.path.join(root, "testing", "_internal", "common_distributed.py")
        self.assertFalse(hooks.hidden(test_file))
        self.assertTrue(hooks.hidden(library))
        self.assertTrue(hooks.hidden(os.path.join(root, "distributed", "distributed_c10d.py")))
        scope = {"torch": torch}
        exec(compile("def make():\n    return torch.ones(4)\n", test_file, "exec"), scope)
        with tempfile.TemporaryDirectory() as d:
            with capture(d, device="cpu"):
                scope["make"]()
            path = os.path.join(d, "rank-0.jsonl")
            sites = {r["id"]: (r["file"], r["line"]) for r in records(path, "site")}
            ones = [sites[r["at"]] for r in records(path, "op") if r["name"] == "aten::ones"]
            self.assertEqual(ones, [(test_file, 2)])

    def test_a_thread_the_program_starts_is_captured_on_its_own_timeline(self):
        # Its operators too (a dispatch mode is per thread), ordered with the program's thread
        # by the thread's start and join and the queue's put and get.
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "prefetch_thread")
            lines = {r["id"]: r["line"] for r in records(path, "site")}
            # Each thread's own records, in order (the two interleave as they ran).
            thread, names, per = 0, {}, {0: [], 1: []}
            signals = {}  # signal -> (thread, line) where it was left
            for r in read(path)[1:]:
                if r["k"] == "thread":
                    thread = r["id"]
                    names.setdefault(thread, r.get("name"))
                elif r["k"] == "host_signal":
                    signals[r["id"]] = (thread, lines[r["at"]])
                    per[thread].append(("signal", lines[r["at"]]))
                elif r["k"] == "host_wait":
                    self.assertIn(r["signal"], signals)  # left before it is waited for
                    per[thread].append(("wait", lines[r["at"]], signals[r["signal"]]))
                elif r["k"] == "op" and lines[r["at"]] in (22, 29):
                    per[thread].append(("op", lines[r["at"]]))
            self.assertEqual(names, {1: "loader", 0: None})
            self.assertEqual(per[1], [
                ("wait", 26, (0, 26)),  # its start: t.start() on the program's thread
                ("op", 22), ("signal", 22), ("op", 22), ("signal", 22),  # two batches, put
                ("signal", 23),  # None, put
                ("signal", 26)])  # its end, named by its start
            self.assertEqual(per[0], [
                ("signal", 26),
                ("wait", 28, (1, 22)), ("op", 29),  # each batch got, then added
                ("wait", 28, (1, 22)), ("op", 29),
                ("wait", 28, (1, 23)),
                ("wait", 30, (1, 26))])  # t.join(): the thread's end
            self.assert_checks_clean(d)  # the checker reads the threads and their signals

    def handovers_before(self, path, used_line):
        """The signals the program's thread waited for before its first operator at used_line:
        (line the signal was left at, lines of the operators its thread had run by then)."""
        lines = {r["id"]: r["line"] for r in records(path, "site")}
        thread, ran, signals, got = 0, {}, {}, []
        for r in read(path)[1:]:
            if r["k"] == "thread":
                thread = r["id"]
            elif r["k"] == "op":
                if thread == 0 and lines[r["at"]] == used_line:
                    return got
                ran.setdefault(thread, []).append(lines[r["at"]])
            elif r["k"] == "host_signal":
                signals[r["id"]] = (thread, lines[r["at"]], list(ran.get(thread, [])))
            elif r["k"] == "host_wait" and thread == 0:
                by, at, before = signals[r["signal"]]
                if by != 0:
                    got.append((at, before))
        self.fail(f"no operator at line {used_line} on the program's thread")

    def test_locks_conditions_simple_queues_and_barriers_hand_work_over(self):
        for name, made, used in [("lock_handover", 57, 65), ("condition_handover", 76, 83),
                                 ("simple_queue_handover", 91, 93), ("barrier_handover", 121, 128)]:
            with self.subTest(name), tempfile.TemporaryDirectory() as d:
                path = self.capture_program(d, name)
                waits = self.handovers_before(path, used)
                self.assertTrue(any(made in before for _, before in waits), waits)
                self.assert_checks_clean(d)

    def test_a_future_seen_finished_hands_its_task_over(self):
        # done() polled until True, concurrent.futures.wait() and as_completed(): the program
        # reads what the task made without result(), and still waits for the task's end.
        for name, made, used in [("polled_future", 174, 177), ("waited_futures", 185, 189),
                                 ("waited_futures", 190, 192)]:
            with self.subTest(f"{name}:{used}"), tempfile.TemporaryDirectory() as d:
                path = self.capture_program(d, name)
                waits = self.handovers_before(path, used)
                self.assertTrue(any(made in before for _, before in waits), waits)
                self.assert_checks_clean(d)

    def test_a_copy_into_memory_of_another_device_still_reads_its_source(self):
        # copy_ returns its destination: with that destination off the captured device (a
        # gradient copied into pinned host memory on CUDA; a meta tensor here), the read of
        # the source is still an access, not a view.
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "copy_off_device")
            lines = {r["id"]: r["line"] for r in records(path, "site")}
            made = [r["w"][0][0] for r in records(path, "op") if lines[r["at"]] == 196]
            copies = [r for r in records(path, "op") if r["name"] == "aten::copy_"]
            self.assertEqual([(lines[r["at"]], [x[0] for x in r["r"]], r["w"]) for r in copies],
                             [(198, made, [])])

    def test_a_tensor_made_from_host_data_is_written_where_it_is_made(self):
        # torch.tensor(data, device=...) fills its bytes in C++ where no operator shows, then
        # lifts the tensor: without a write there, a collective reading it would be called a
        # read of memory nothing wrote (an uninitialized_read on a correct program).
        with tempfile.TemporaryDirectory() as d:
            from shardcheck import capture
            with capture(d, device="cpu"):
                t = torch.tensor([1.0, 2.0, 3.0])
                t.add_(1)
            path = os.path.join(d, "rank-0.jsonl")
            ops = [(r["name"], r["r"], r["w"]) for r in records(path, "op")]
            lifted = [o for o in ops if o[0] == "aten::lift_fresh (filled on the host)"]
            self.assertEqual(len(lifted), 1, ops)
            self.assertEqual(lifted[0][1], [])
            buf = lifted[0][2][0][0]
            self.assertEqual(lifted[0][2], [[buf, 0, 12]])
            add = [o for o in ops if o[0] == "aten::add_"]
            self.assertEqual(add[0][1], [[buf, 0, 12]])

    def test_only_a_backends_own_frees_wait_for_their_collectives(self):
        # A free the program makes (del) orders nothing: the collective that used the tensor
        # may still run. One the process group's watchdog makes waited for it.
        from shardcheck import capture
        from shardcheck.capture import hooks as hooks_module
        with tempfile.TemporaryDirectory() as d:
            with capture(d, device="cpu") as cap:
                seen = []
                cap._hooks.rec.on_free = lambda ptr, site, background: seen.append(background)
                cap._hooks.on_free(1)
                with hooks_module.background_frees():
                    cap._hooks.on_free(2)
                del cap._hooks.rec.on_free
        self.assertEqual(seen, [False, True])

    def test_a_forked_data_loader_worker_writes_nothing_into_the_rank_file(self):
        # The workers are forked with the capture on: their operators are no rank's, and
        # neither their records nor their copy of the parent's buffer may reach the file.
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "forked_loader")
            rows = read(path)  # every line whole JSON
            self.assertEqual(rows[-1], {"k": "end", "records": len(rows) - 2})
            names = {r["name"] for r in rows if r.get("k") == "op"}
            self.assertNotIn("aten::mul", names)  # the workers' only multiply
            self.assertIn("aten::addmm", names)  # the program's own forward
            self.assertEqual([i for i, r in enumerate(rows) if "shardcheck_capture" in r], [0])
            self.assert_checks_clean(d)

    def test_sys_exit_0_after_the_run_is_a_finished_rank_and_another_status_is_partial(self):
        # sys.exit(main()) ends most scripts: a status of 0 (or None) is a rank that finished.
        from shardcheck import capture
        for code, end in [(0, None), (None, None), (3, "exited with status 3"),
                          ("no data", "exited: no data")]:
            with self.subTest(code=code), tempfile.TemporaryDirectory() as d:
                with self.assertRaises(SystemExit):
                    with capture(d, device="cpu"):
                        torch.ones(4).mul_(2)
                        sys.exit(code)
                last = read(os.path.join(d, "rank-0.jsonl"))[-1]
                self.assertEqual(last.get("partial"), end, last)

    def test_every_handover_at_once_captures_and_checks_clean(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "every_handover")
            kinds = {r["k"] for r in read(path)[1:]}
            self.assertTrue({"thread", "host_signal", "host_wait"} <= kinds, kinds)
            self.assertEqual(read(path)[-1]["k"], "end")
            self.assert_checks_clean(d)

    def test_a_priority_queue_hands_each_item_over_from_its_own_put(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "priority_queue_handover")
            waits = self.handovers_before(path, 111)
            # The semaphore's release, then the get: the put of the item it returned (line
            # 105, the higher priority), not the first put.
            self.assertEqual([at for at, _ in waits][-1], 105)
            self.assertNotIn(104, [at for at, _ in waits])
            self.assert_checks_clean(d)

    def test_a_pool_task_waits_for_its_submit_and_result_waits_for_the_task(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "pool_prefetch")
            thread, signals, waits, full, full_signals, add_waits = 0, {}, [], None, {}, []
            for r in read(path)[1:]:
                if r["k"] == "thread":
                    thread = r["id"]
                elif r["k"] == "host_signal":
                    signals[r["id"]] = thread
                elif r["k"] == "host_wait":
                    waits.append(r["signal"])
                elif r["k"] == "op" and r["name"] == "aten::full":
                    full, full_signals, full_at = thread, dict(signals), r["at"]
                elif r["k"] == "op" and r["name"] == "aten::add_":
                    self.assertEqual(thread, 0)
                    add_waits = list(waits)
            self.assertIsNotNone(full)
            self.assertNotEqual(full, 0)  # the pool's thread ran it, under the capture
            # torch.full ran with no frame of the program's: named by the submit's line.
            lines = {r["id"]: r["line"] for r in records(path, "site")}
            self.assertEqual(lines[full_at], 44)
            # Before the add, the program's thread waited for a signal the pool's thread left
            # after it made the tensor (the future's result).
            self.assertTrue(any(signals[s] == full and s not in full_signals for s in add_waits))
            self.assert_checks_clean(d)

    def test_autograds_device_thread_works_for_the_thread_waiting_in_backward(self):
        # On CUDA, backward's nodes run on autograd's device thread (a C++ thread) while the
        # thread that called backward() waits: a stand-in for it, started from a node's
        # backward, must take the caller's timeline, and the main thread's outside that.
        import _thread

        import torch
        from shardcheck import capture
        seen = []

        def device_thread(hooks):
            done = _thread.allocate_lock()
            done.acquire()

            def run():
                hooks._autograd_threads.add(threading.get_ident())
                seen.append(hooks.timeline())
                done.release()
            _thread.start_new_thread(run, ())
            done.acquire()

        class Node(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                device_thread(cap._hooks)
                return g * 2

        def train():
            x = torch.ones(4, requires_grad=True)
            Node.apply(x).sum().backward()

        with tempfile.TemporaryDirectory() as d:
            with capture(d, device="cpu") as cap:
                trainer = threading.Thread(target=train, name="trainer")
                trainer.start()
                trainer.join()
                train()  # on the main thread
        self.assertEqual(len(seen), 2)
        key, name, _ = seen[0]
        self.assertEqual((key[0], name), ("thread", "trainer"))
        self.assertIsNone(seen[1])

    def test_a_cpu_storage_the_program_drops_is_freed_where_it_dropped_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = self.capture_program(d, "dropped_storage")
            lines = {r["id"]: r["line"] for r in records(path, "site")}
            got = [(r["k"], r.get("buf"), lines[r["at"]]) for r in read(path)[1:]
                   if r["k"] in ("alloc", "free", "op") and 35 <= lines[r["at"]] <= 38]
            a = got[0][1]
            self.assertEqual([(k, line) for k, _, line in got[:4]],
                             [("alloc", 35), ("op", 35), ("alloc", 36), ("op", 36)])
            # a's storage, dropped at line 37, is freed before line 38's operator.
            self.assertEqual(got[4], ("free", a, 38))
            self.assertEqual([(k, line) for k, _, line in got[5:7]], [("alloc", 38), ("op", 38)])

    def test_operators_that_resize_what_they_write_stay_inside_their_buffers(self):
        # out= arguments of the wrong size, resize_, and storages made and dropped in a loop
        # (on CPU no free is reported, so addresses come back with other sizes).
        from shardcheck import capture
        with tempfile.TemporaryDirectory() as d:
            with capture(d, device="cpu"):
                a, b = torch.randn(8, 16), torch.randn(16, 16)
                c = torch.empty(0)
                torch.mm(a, b, out=c)
                x = torch.zeros(4)
                x.resize_(64)
                x.fill_(1.0)
                total = x.sum() + c.sum()
                for n in (16, 64, 8, 256, 32, 1024):
                    y = torch.ones(n) * 2
                    total = total + torch.mm(y.view(1, n), torch.ones(n, 1)).sum()
                total.item()
            path = os.path.join(d, "rank-0.jsonl")
            self.assertEqual(ranges_outside_their_buffers(path), [])
            mm = [r for r in records(path, "op") if r["name"] == "aten::mm"][0]
            self.assertEqual(mm["w"][0][2], 8 * 16 * 4)  # the resized output, written whole
            self.assert_checks_clean(d)

    def test_fsdp_all_gather_copy_in_writes_its_slice_and_reads_its_inputs(self):
        # FSDP2 (torch 2.x) defines the op with a schema that marks nothing written; its eager
        # kernel copies the inputs into this rank's slice of all_gather_output. Torch 1.13 has
        # no FSDP2: the same definition stands in for it here.
        import torch
        if not hasattr(torch.ops, "fsdp") or not hasattr(torch.ops.fsdp, "all_gather_copy_in"):
            try:
                lib = torch.library.Library("fsdp", "FRAGMENT")
            except ValueError:  # torch 1.13 knows DEF and IMPL only
                lib = torch.library.Library("fsdp", "DEF")
            lib.define("all_gather_copy_in(Tensor[] all_gather_inputs, Tensor all_gather_output, "
                       "SymInt[] inp_split_sizes, SymInt all_gather_input_numel, SymInt rank) "
                       "-> (Tensor, Tensor)")

            def kernel(inputs, output, sizes, numel, rank):
                slice_ = output.narrow(0, numel * rank, numel)
                with torch.no_grad():
                    for dst, src in zip(torch.split(slice_, sizes), inputs):
                        dst.copy_(src)
                return slice_, output
            lib.impl("all_gather_copy_in", kernel, "CPU")
            _LIBRARIES.append(lib)  # the definition lives as long as its library
        from shardcheck import capture
        with tempfile.TemporaryDirectory() as d:
            with capture(d, device="cpu"):
                a, b = torch.ones(3), torch.ones(5)
                out = torch.empty(16)
                torch.ops.fsdp.all_gather_copy_in([a, b], out, [3, 5], 8, 1)
            ops = [r for r in records(os.path.join(d, "rank-0.jsonl"), "op")
                   if r["name"] == "fsdp::all_gather_copy_in"]
            self.assertEqual(len(ops), 1)
            (op,) = ops
            self.assertEqual(len(op["r"]), 2)  # the two inputs, never the output
            self.assertEqual([w[1:] for w in op["w"]], [[32, 32]])  # bytes [32, 64): rank 1's slice

    def test_command_line_runs_a_script_as_main(self):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "prog.py")
            with open(script, "w") as f:
                f.write("import sys, torch\nx = torch.zeros(4)\nx.add_(float(sys.argv[1]))\n")
            out = os.path.join(d, "cap")
            p = subprocess.run([sys.executable, "-m", "shardcheck.capture", "--out", out,
                                "--device", "cpu", "--", script, "2"],
                               env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("shardcheck run " + out, p.stderr)
            lines = read(os.path.join(out, "rank-0.jsonl"))
            self.assertEqual(lines[0]["argv"], [script, "2"])
            self.assertIn("aten::add_", [r.get("name") for r in lines])

    @unittest.skipUnless(os.environ.get("SHARDCHECK_BIN"), "SHARDCHECK_BIN is not set")
    def test_check_captures_and_checks_in_one_command(self):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "prog.py")
            with open(script, "w") as f:
                f.write("import torch\nx = torch.zeros(4)\nx.add_(1)\n")
            out = os.path.join(d, "cap")
            p = subprocess.run([sys.executable, "-m", "shardcheck.capture", "--check", "--out",
                                out, "--device", "cpu", "--", script],
                               env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("clean   cap: no findings", p.stdout)

    def test_command_line_refuses_a_missing_program(self):
        for args in (["--out", "x"], ["--out", "x", "--", "no-such-file.py"], []):
            p = subprocess.run([sys.executable, "-m", "shardcheck.capture"] + args,
                               env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("error", p.stderr)

    def test_sanitizer_variable_is_refused(self):
        from shardcheck import capture
        os.environ["TORCH_CUDA_SANITIZER"] = "0"
        try:
            with tempfile.TemporaryDirectory() as d:
                with self.assertRaises(RuntimeError):
                    with capture(d, device="cpu"):
                        pass
        finally:
            del os.environ["TORCH_CUDA_SANITIZER"]


GLOO_PROGRAM = r"""
import os, sys
import torch
import torch.distributed as dist
sys.path.insert(0, os.environ["PYROOT"])
from shardcheck import capture
dist.init_process_group("gloo")
rank = dist.get_rank()
with capture(sys.argv[1], device="cpu"):
    t = torch.full((16,), float(rank))
    dist.all_reduce(t)
    dist.broadcast(t, src=1)
    op = dist.ReduceOp.SUM
    if rank == 0 and len(sys.argv) > 2:
        op = dist.ReduceOp.MAX  # the reduction now differs between the ranks
    dist.all_reduce(t, op=op)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class GlooTest(unittest.TestCase):
    def capture_two_ranks(self, d, *extra):
        script = os.path.join(d, "prog.py")
        with open(script, "w") as f:
            f.write(GLOO_PROGRAM)
        port = str(free_port())
        procs = [subprocess.Popen([sys.executable, script, os.path.join(d, "cap")] + list(extra),
                                  env=dict(os.environ, PYROOT=PYROOT, RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for r in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err.decode())
        return os.path.join(d, "cap")

    def test_each_rank_writes_its_collectives(self):
        with tempfile.TemporaryDirectory() as d:
            cap = self.capture_two_ranks(d)
            colls = []
            for r in range(2):
                lines = read(os.path.join(cap, "rank-%d.jsonl" % r))
                self.assertEqual((lines[0]["rank"], lines[0]["world_size"]), (r, 2))
                groups = records(os.path.join(cap, "rank-%d.jsonl" % r), "group")
                self.assertEqual(groups[0]["ranks"], [0, 1])
                colls.append([(c["op"], c["dtype"], c["count"], c["reduce"], c["root"])
                              for c in records(os.path.join(cap, "rank-%d.jsonl" % r), "coll")])
            self.assertEqual(colls[0], colls[1])
            self.assertEqual(colls[0], [("all_reduce", "f32", 16, "sum", 0),
                                        ("broadcast", "f32", 16, "none", 1),
                                        ("all_reduce", "f32", 16, "sum", 0)])
            shardcheck = os.environ.get("SHARDCHECK_BIN")
            if shardcheck:
                p = subprocess.run([shardcheck, "run", cap], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_a_reduce_op_mismatch_is_captured_as_it_happened(self):
        with tempfile.TemporaryDirectory() as d:
            cap = self.capture_two_ranks(d, "mismatch")
            last = [records(os.path.join(cap, "rank-%d.jsonl" % r), "coll")[-1]["reduce"]
                    for r in range(2)]
            self.assertEqual(last, ["max", "sum"])
            shardcheck = os.environ.get("SHARDCHECK_BIN")
            if shardcheck:
                p = subprocess.run([shardcheck, "run", cap], capture_output=True, text=True)
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                self.assertIn("collective_mismatch", p.stdout)


if __name__ == "__main__":
    unittest.main()


class ImportTest(unittest.TestCase):
    def test_import_gives_the_module_and_calling_it_captures(self):
        import types

        import shardcheck
        import shardcheck.capture as module
        self.assertIsInstance(module, types.ModuleType)
        self.assertIs(shardcheck.capture, module)
        self.assertTrue(hasattr(module, "Capture"))
        self.assertTrue(callable(module))
