"""Point-to-point transfers (docs/p2p.md): how the capture writes them, and
examples/pytorch/p2p_ring.py captured at 2 and 4 CPU ranks over gloo, each verdict held to what
the program itself shows without shardcheck: the ring runs to the end with the values it should
have received, the blocking receive-first ring hangs until its timeout, and the reads and writes
of a transfer's tensor before its wait are races (the values they see differ from run to run:
docs/p2p.md has the runs)."""

import os
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)
sys.path.insert(0, PYROOT)

from shardcheck.capture.recorder import Recorder  # noqa: E402

from .test_capture import read, records  # noqa: E402

try:
    import torch  # noqa: F401
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    HAVE_GLOO = False

RING = os.path.join("examples", "pytorch", "p2p_ring.py")


class RecordsTest(unittest.TestCase):
    """The records a transfer leaves, driven by hand as the hooks would."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "rank-0.jsonl")
        self.rec = Recorder(self.path, {"rank": 0, "world_size": 2}, sees_frees=False)
        self.site = self.rec.site("ring.py", 6, "main")
        self.gid = self.rec.group("world", "world", [0, 1])

    def tearDown(self):
        self.dir.cleanup()

    def test_a_gloo_request_runs_on_its_own_stream_between_a_start_and_an_end_event(self):
        span = (0x1000, 64, 0, 64)
        self.rec.op("aten::fill_", 0, [], [span], self.site)
        end = self.rec.p2p_request("send", 1, self.gid, span, "f32", 16, "0", "", self.site,
                                   "gloo send to 1")
        self.rec.event_sync(end, self.site)
        self.rec.close()
        body = [r for r in read(self.path)[1:] if r["k"] not in ("site", "group", "alloc")]
        lane = [s["id"] for s in records(self.path, "stream") if s["name"] == "gloo send to 1"]
        self.assertEqual(len(lane), 1)
        kinds = [(r["k"], r.get("stream")) for r in body]
        self.assertEqual(kinds, [("stream", None), ("op", 0), ("stream", None),
                                 ("event_record", 0), ("event_wait", lane[0]),
                                 ("send", lane[0]), ("event_record", lane[0]),
                                 ("event_sync", None), ("end", None)])
        self.assertEqual(body[-2]["event"], body[-3]["event"])  # the wait syncs with its end
        self.assertNotEqual(body[3]["event"], body[-3]["event"])

    def test_requests_to_one_peer_share_a_stream_per_direction_and_each_has_its_end(self):
        a, b = (0x1000, 64, 0, 64), (0x2000, 64, 0, 64)
        ends = [self.rec.p2p_request("send", 1, self.gid, a, "f32", 16, "0", "", self.site, "s"),
                self.rec.p2p_request("recv", 1, self.gid, b, "f32", 16, "0", "", self.site, "r"),
                self.rec.p2p_request("send", 1, self.gid, a, "f32", 16, "0", "", self.site, "s")]
        self.rec.close()
        self.assertEqual(len(set(ends)), 3)
        streams = [r["stream"] for r in records(self.path, "send") + records(self.path, "recv")]
        self.assertEqual(len(set(streams)), 2)
        self.assertEqual(streams[0], streams[1])  # the two sends

    def test_a_transfers_tensor_freed_unseen_is_freed_after_its_stream(self):
        span = (0x1000, 64, 0, 64)
        self.rec.p2p_request("recv", 1, self.gid, span, "f32", 16, "0", "", self.site, "r")
        self.rec._free(0, self.site)  # found expired: the Work let it go once done
        self.rec.close()
        kinds = [r["k"] for r in read(self.path)[1:]]
        self.assertEqual(kinds[-3:], ["stream_sync", "free", "end"])
        self.assertEqual(records(self.path, "stream_sync")[0]["stream"],
                         records(self.path, "recv")[0]["stream"])

    def test_a_batch_forks_each_transfer_onto_its_own_stream_and_joins_before_the_next_work(self):
        nccl = 0x99
        a, b = (0x1000, 64, 0, 64), (0x2000, 64, 0, 64)
        self.rec.p2p("send", 1, self.gid, nccl, a, "f32", 16, "0", "", self.site, batch=True)
        self.rec.p2p("recv", 1, self.gid, nccl, b, "f32", 16, "0", "", self.site, batch=True)
        self.rec.event_wait(0xE1, nccl, self.site)  # a wait does not end the batch
        self.rec.event_record(0xE2, nccl, self.site)  # the batch's end event does
        self.rec.close()
        body = [r for r in read(self.path)[1:] if r["k"] not in ("site", "group", "alloc",
                                                                  "stream")]
        group = records(self.path, "stream")[1]["id"]
        send, recv = records(self.path, "send")[0], records(self.path, "recv")[0]
        self.assertEqual(len({group, send["stream"], recv["stream"]}), 3)
        kinds = [(r["k"], r.get("stream")) for r in body]
        self.assertEqual(kinds, [
            ("event_record", group), ("event_wait", send["stream"]), ("send", send["stream"]),
            ("event_record", send["stream"]),
            ("event_record", group), ("event_wait", recv["stream"]), ("recv", recv["stream"]),
            ("event_record", recv["stream"]),
            ("event_wait", group),
            ("event_wait", group), ("event_wait", group), ("event_record", group),
            ("end", None)])
        self.assertEqual(body[9]["event"], body[3]["event"])  # joins: each transfer's last record
        self.assertEqual(body[10]["event"], body[7]["event"])

    def test_is_completed_answering_true_is_the_requests_wait(self):
        from shardcheck.capture.p2p import Requests

        class Hooks:
            rec = self.rec
            _tls = threading.local()

            def site(self):
                return 0

            def _enter_collective(self, what):
                pass

            def _leave_collective(self):
                pass

        requests = Requests(Hooks(), None, threading.local(), None, None)
        span = (0x1000, 64, 0, 64)
        end = self.rec.p2p_request("recv", 1, self.gid, span, "f32", 16, "0", "", 0, "r")
        work = object()
        requests.pending[work] = ([end], "irecv from rank 1", None)
        answers = iter([False, True])
        polled = requests.polling(lambda w: next(answers))
        waited = requests.waiting(lambda w: True)
        self.assertFalse(polled(work))
        self.assertEqual(records(self.path, "event_sync"), [])
        self.assertTrue(polled(work))
        self.assertTrue(waited(work))  # already waited: no second sync
        self.rec.close()
        syncs = records(self.path, "event_sync")
        self.assertEqual(len(syncs), 1)
        self.assertEqual(syncs[0]["event"], records(self.path, "event_record")[-1]["event"])


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class RingTest(unittest.TestCase):
    def capture(self, d, name, *args, ranks=2, timeout=60):
        out = os.path.join(d, name)
        cmd = [sys.executable, "-m", "shardcheck.capture", "--nproc-per-node", str(ranks),
               "--device", "cpu", "--out", out, "--timeout", str(timeout), "--", RING] + list(args)
        p = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=PYROOT),
                           capture_output=True, text=True, timeout=300)
        return out, p

    def verdict(self, cap):
        shardcheck = os.environ.get("SHARDCHECK_BIN")
        if not shardcheck:
            self.skipTest("no SHARDCHECK_BIN")
        p = subprocess.run([shardcheck, "run", cap], capture_output=True, text=True)
        return p.returncode, p.stdout

    def ran_to_the_end(self, p, ranks):
        """The program's own word: every rank received what the ring passes it."""
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for r in range(ranks):
            want = float((r - 2) % ranks)
            self.assertIn("rank %d: received [%r], expected [%r]" % (r, want, want), p.stdout)

    def test_the_ring_runs_to_the_end_and_is_clean_at_2_and_4_ranks(self):
        for ranks in (2, 4):
            with self.subTest(ranks=ranks), tempfile.TemporaryDirectory() as d:
                cap, p = self.capture(d, "ring", ranks=ranks)
                self.ran_to_the_end(p, ranks)
                code, out = self.verdict(cap)
                self.assertEqual(code, 0, out)

    def test_the_ring_of_batches_is_clean(self):
        with tempfile.TemporaryDirectory() as d:
            cap, p = self.capture(d, "batch", "--batch")
            self.ran_to_the_end(p, 2)
            self.assertEqual(self.verdict(cap)[0], 0)

    def test_blocking_receives_first_hang_until_their_timeout_and_are_a_deadlock(self):
        # Uncaptured, every rank waits in dist.recv for a send its peer never reaches: both are
        # still running at the 20 s timeout, and are killed there.
        port = str(_free_port())
        procs = [subprocess.Popen([sys.executable, RING, "--deadlock"], cwd=REPO,
                                  env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                                           WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                           MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for r in range(2)]
        hung = 0
        for q in procs:
            try:
                q.wait(timeout=20)
            except subprocess.TimeoutExpired:
                hung += 1
        for q in procs:
            q.kill()
            q.communicate()
        self.assertEqual(hung, 2)
        with tempfile.TemporaryDirectory() as d:
            cap, p = self.capture(d, "deadlock", "--deadlock", timeout=10)
            self.assertNotEqual(p.returncode, 0)
            code, out = self.verdict(cap)
            self.assertEqual(code, 1, out)
            self.assertIn("[deadlock]", out)
            line = "%s:%d" % (RING, _line_of("        dist.recv(recv, prev)\n        dist.send"))
            self.assertIn("rank 0 gloo recv from 1: recv from 1 at " + line, out)
            self.assertIn("rank 1 gloo recv from 0: recv from 0 at " + line, out)
            self.assertIn("PARTIAL", out)

    def test_even_ranks_sending_first_run_to_the_end_and_are_clean(self):
        with tempfile.TemporaryDirectory() as d:
            cap, p = self.capture(d, "fix", "--deadlock", "--fix")
            self.ran_to_the_end(p, 2)
            self.assertEqual(self.verdict(cap)[0], 0)

    def race_found_and_fixed(self, flag, transfer, access):
        """The race of `flag` names the transfer's line and the access's; --fix is clean."""
        with tempfile.TemporaryDirectory() as d:
            cap, p = self.capture(d, "bug", flag)
            self.assertEqual(p.returncode, 0, p.stderr)
            code, out = self.verdict(cap)
            self.assertEqual(code, 1, out)
            self.assertIn("[stream_race]", out)
            self.assertIn("%s at %s:%d" % (access[0], RING, _line_of(access[1])), out)
            self.assertIn("%s at %s:%d" % (transfer[0], RING, _line_of(transfer[1])), out)
            self.assertIn("call wait() on the request of", out)
            cap, p = self.capture(d, "fix", flag, "--fix")
            self.ran_to_the_end(p, 2)
            code, out = self.verdict(cap)
            self.assertEqual(code, 0, out)

    def test_a_read_of_an_irecvs_tensor_before_its_wait_races_with_the_transfer(self):
        self.race_found_and_fixed("--read-early", ("recv from 1", "r = dist.irecv(recv, prev)"),
                                  ("aten::clone", "early = recv.clone()"))

    def test_a_write_of_an_isends_tensor_before_its_wait_races_with_the_transfer(self):
        self.race_found_and_fixed("--write-early", ("send to 1", "s = dist.isend(send, nxt)"),
                                  ("aten::fill_", "send.fill_(-1.0)  # the isend"))


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _line_of(text):
    """The line of examples/pytorch/p2p_ring.py where `text` begins (it must occur once)."""
    with open(os.path.join(REPO, RING), encoding="utf-8") as f:
        source = f.read()
    at = source.index(text)
    assert source.find(text, at + 1) < 0, text
    return source.count("\n", 0, at) + 1 + (1 if text.startswith("\n") else 0)


if __name__ == "__main__":
    unittest.main()
