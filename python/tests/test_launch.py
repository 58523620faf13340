"""The launcher (python3 -m shardcheck.capture --nproc-per-node N) on 4 CPU ranks over gloo: real
programs that finish, hang, raise or are signalled end with every rank's file whole, and the
checker names what went wrong with the Python lines and never calls such a program clean."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)

try:
    import torch  # noqa: F401
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    HAVE_GLOO = False

PROGRAMS = {
    "clean.py": """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.full((8,), float(dist.get_rank()))
for _ in range(3):
    dist.all_reduce(t)
dist.barrier()
""",
    # Rank 0 reduces on group a, then b; the others on b, then a: an order cycle.
    "cross_group.py": """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
a = dist.new_group([0, 1, 2, 3])
b = dist.new_group([0, 1, 2, 3])
t = torch.ones(8)
first, second = (a, b) if dist.get_rank() == 0 else (b, a)
dist.all_reduce(t, group=first)
dist.all_reduce(t, group=second)
""",
    "raises.py": """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
dist.all_reduce(t)
if dist.get_rank() == 2:
    raise ValueError("rank 2 cannot go on")
dist.all_reduce(t)
""",
    # Each rank forks a child that ends as a program does (its atexit, its buffers flushed):
    # the child's copy of the rank's unflushed records and end must not reach the file.
    # (It forks before the process group is made: a child of a gloo rank hangs at its exit.)
    "forks.py": """
import os, sys
import torch, torch.distributed as dist
t = torch.ones(8) * 2
pid = os.fork()
if pid == 0:
    t + 1
    sys.exit(0)
os.waitpid(pid, 0)
dist.init_process_group("gloo")
dist.all_reduce(t)
""",
    # The program starts its own ranks (PyTorch's DDP tutorial does): with --swap, rank 1
    # reduces its two tensors in the other order, which gloo aborts on.
    "spawns.py": """
import os, socket, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, world, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    a = torch.ones(8)
    b = torch.ones(16)
    first, second = (b, a) if "--swap" in sys.argv and rank == 1 else (a, b)
    dist.all_reduce(first)
    dist.all_reduce(second)
    dist.destroy_process_group()

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(2, port), nprocs=2)
""",
    # PyTorch's "Writing distributed applications" tutorial: a multiprocessing.Process per
    # rank, each calling init_process_group with its rank; argv: port, start method, [--swap].
    "processes.py": """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, size):
    a, b = torch.ones(8), torch.ones(16)
    first, second = (b, a) if "--swap" in sys.argv and rank == 1 else (a, b)
    dist.all_reduce(first)
    dist.all_reduce(second)

def init_process(rank, size, fn, backend="gloo"):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.set_start_method(sys.argv[2])
    procs = [mp.Process(target=init_process, args=(rank, 2, run)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode for p in procs))
""",
    # A process that is no rank (it never calls init_process_group): the program's own work
    # is the capture, in rank-0.jsonl.
    "worker_process.py": """
import multiprocessing as mp
import torch

def work(n):
    torch.ones(n).add_(1)

if __name__ == "__main__":
    x = torch.ones(4)
    p = mp.Process(target=work, args=(8,))
    p.start()
    p.join()
    y = x.mul(2)
""",
    # Each rank ends with os._exit (skipping the process group's teardown), which runs no
    # finally and no atexit: 0 on every rank but 3.
    "os_exit.py": """
import os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
dist.all_reduce(t)
os._exit(5 if dist.get_rank() == 3 else 0)
""",
    # Each rank saves a checkpoint when SIGTERM comes (as a job preempted by Slurm does) and
    # exits 0: the capture must let the program's own handler run to its end.
    "handles_term.py": """
import signal, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")

def save(signo, frame):
    time.sleep(0.5)  # a checkpoint takes a while
    with open("ckpt-%d" % dist.get_rank(), "w") as f:
        f.write("saved")
    sys.exit(0)

signal.signal(signal.SIGTERM, save)
t = torch.ones(8)
dist.all_reduce(t)
time.sleep(60)
""",
    # Rank 0 receives from whichever rank sends first, blocking and not, as PyTorch's
    # test_send_recv_any_source does; the value received says who sent it.
    "any_source.py": """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
senders = []
if rank == 0:
    for _ in range(1, world):
        t = torch.full((4,), -1.0)
        sender = dist.recv(t)
        assert t.eq(sender).all(), (sender, t)
        senders.append(sender)
        t = torch.full((4,), -1.0)
        work = dist.irecv(t)
        work.wait()
        assert t.eq(work._source_rank()).all(), (work._source_rank(), t)
        senders.append(work._source_rank())
    assert sorted(senders) == sorted(2 * list(range(1, world))), senders
else:
    t = torch.full((4,), float(rank))
    dist.send(t, 0)
    dist.send(t, 0)
dist.barrier()
""",
    # Rank 3 sends to rank 1 on their own group, where rank 1 is the group's rank 0.
    "p2p_subgroup.py": """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
pair = dist.new_group([1, 3])
t = torch.full((4,), float(dist.get_rank()))
if dist.get_rank() == 3:
    dist.send(t, 1, group=pair)
elif dist.get_rank() == 1:
    dist.recv(t, 3, group=pair)
    assert t.eq(3).all(), t
dist.barrier()
""",
    # Every rank passes a monitored barrier; then rank 1 skips one, which rank 0 reports, as
    # PyTorch's test_monitored_barrier_gloo has it (with --fix every rank calls it).
    "monitored_barrier.py": """
import sys
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
dist.monitored_barrier(timeout=timedelta(seconds=20))
dist.all_reduce(t)
if "--fix" in sys.argv or rank != 1:
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=2 if rank == 0 else 20))
        assert "--fix" in sys.argv, "rank 1 skipped the barrier: it cannot pass"
    except RuntimeError as e:
        assert "--fix" not in sys.argv, e
        assert rank != 0 or "Rank 1 failed to pass monitoredBarrier" in str(e), e
# Rank 0's failure closes gloo's pairs: the ranks wait for it on the store, no collective.
store = dist.distributed_c10d._get_default_store()
if rank == 0:
    store.set("done", "1")
store.wait(["done"])
""",
    # Every rank but 3 waits in a collective that rank 3 is late to: time to signal.
    "slow.py": """
import time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(8)
dist.all_reduce(t)
if dist.get_rank() == 3:
    time.sleep(60)
dist.all_reduce(t)
""",
}


def text_of(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def end_record(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    last = json.loads(lines[-1])
    return last if last.get("k") == "end" else None


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class LauncherTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        for name, text in PROGRAMS.items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text.lstrip())

    def tearDown(self):
        self.tmp.cleanup()

    def launch(self, program, *extra, check=True, args=()):
        cmd = [sys.executable, "-m", "shardcheck.capture", "--nproc-per-node", "4", "--out",
               "cap", "--device", "cpu", "--timeout", "4"] + (["--check"] if check else []) + \
            list(extra) + ["--", program] + list(args)
        return subprocess.Popen(cmd, cwd=self.dir, env=dict(os.environ, PYTHONPATH=PYROOT),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run_launch(self, program, *extra, check=True, args=()):
        p = self.launch(program, *extra, check=check, args=args)
        out, err = p.communicate(timeout=120)
        return p.returncode, out, err

    def rank_ends(self):
        return [end_record(os.path.join(self.dir, "cap", "rank-%d.jsonl" % r)) for r in range(4)]

    def test_a_program_that_finishes_is_captured_whole_on_every_rank_and_checks_clean(self):
        code, out, err = self.run_launch("clean.py", check=bool(os.environ.get("SHARDCHECK_BIN")))
        self.assertEqual(code, 0, out + err)
        for end in self.rank_ends():
            self.assertIsNotNone(end)
            self.assertNotIn("partial", end)
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("clean   cap: no findings", out)

    def test_a_recv_from_any_source_is_recorded_from_the_rank_that_sent_it(self):
        # Unrecorded, every send to rank 0 was left without its recv: a deadlock.
        checking = bool(os.environ.get("SHARDCHECK_BIN"))
        code, out, err = self.run_launch("any_source.py", check=checking)
        self.assertEqual(code, 0, out + err)  # the program asserted what each recv got
        with open(os.path.join(self.dir, "cap", "rank-0.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        lines = {r["id"]: r["line"] for r in rows if r.get("k") == "site"}
        recvs = [(r["peer"], lines[r["at"]]) for r in rows if r.get("k") == "recv"]
        self.assertEqual(sorted(p for p, _ in recvs), [1, 1, 2, 2, 3, 3])
        self.assertEqual({line for _, line in recvs}, {8, 12})  # the recv and the irecv
        if checking:
            self.assertIn("clean   cap: no findings", out)

    def test_a_send_on_a_group_names_that_group_and_its_peers_global_rank(self):
        # torch 1.x hands the operator an opaque group: the pair was recorded on the world,
        # rank 3 sending to rank 0 (the pair's rank 0 read as a world rank).
        checking = bool(os.environ.get("SHARDCHECK_BIN"))
        code, out, err = self.run_launch("p2p_subgroup.py", check=checking)
        self.assertEqual(code, 0, out + err)  # rank 1 asserted it got rank 3's tensor
        for rank, kind, peer in ((3, "send", 1), (1, "recv", 3)):
            with open(os.path.join(self.dir, "cap", "rank-%d.jsonl" % rank)) as f:
                rows = [json.loads(line) for line in f]
            groups = {r["id"]: r["ranks"] for r in rows if r.get("k") == "group"}
            p2p = [(r["peer"], groups[r["group"]]) for r in rows if r.get("k") == kind]
            self.assertEqual(p2p, [(peer, [1, 3])])
        if checking:
            self.assertIn("clean   cap: no findings", out)

    def test_a_monitored_barrier_is_its_groups_barrier_and_one_a_rank_skips_is_found(self):
        # The backend makes it of sends no operator shows: unrecorded, a rank that skipped it
        # was clean. Each program asserts what gloo did (rank 0 names rank 1 as missing).
        checking = bool(os.environ.get("SHARDCHECK_BIN"))
        for extra, skipped in ((["--fix"], False), ([], True)):
            with self.subTest(skipped=skipped):
                shutil.rmtree(os.path.join(self.dir, "cap"), ignore_errors=True)
                code, out, err = self.run_launch("monitored_barrier.py", *[], check=checking,
                                                 args=extra)
                barriers = []
                for rank in range(4):
                    with open(os.path.join(self.dir, "cap", "rank-%d.jsonl" % rank)) as f:
                        rows = [json.loads(line) for line in f]
                    barriers.append(sum(r.get("name") == "torch.distributed.monitored_barrier"
                                        for r in rows if r.get("k") == "coll"))
                    self.assertNotIn("partial", rows[-1], rows[-1])  # gloo's error was caught
                self.assertEqual(barriers, [2, 1, 2, 2] if skipped else [2, 2, 2, 2])
                if checking:
                    self.assertEqual(code, 1 if skipped else 0, out + err)
                    self.assertIn("[deadlock]" if skipped else "clean   cap: no findings", out)

    def test_a_forked_child_that_exits_leaves_every_rank_file_as_its_rank_wrote_it(self):
        code, out, err = self.run_launch("forks.py", check=bool(os.environ.get("SHARDCHECK_BIN")))
        self.assertEqual(code, 0, out + err)
        for r in range(4):
            with open(os.path.join(self.dir, "cap", "rank-%d.jsonl" % r)) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual(rows[-1], {"k": "end", "records": len(rows) - 2})
            self.assertEqual(sum("shardcheck_capture" in row for row in rows), 1)
            self.assertNotIn("aten::add", {row.get("name") for row in rows})  # the child's
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("clean   cap: no findings", out)

    def test_os_exit_ends_each_rank_file_finished_or_partial_by_its_status(self):
        code, out, err = self.run_launch("os_exit.py", check=bool(os.environ.get("SHARDCHECK_BIN")))
        self.assertNotEqual(code, 0)
        ends = self.rank_ends()
        self.assertEqual([e.get("partial") for e in ends], [None, None, None,
                                                            "exited with status 5"])
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("rank 3: exited with status 5 at os_exit.py:6", out)

    def capture_spawning(self, *extra, program="spawns.py"):
        """The capture without its launcher: the program starts its ranks itself."""
        check = ["--check"] if os.environ.get("SHARDCHECK_BIN") else []
        p = subprocess.run([sys.executable, "-m", "shardcheck.capture", "--out", "cap",
                            "--device", "cpu", "--timeout", "20"] + check +
                           ["--", program] + list(extra), cwd=self.dir,
                           env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                           text=True, timeout=120)
        # The capture's lock (folder.py) is no rank's file.
        files = sorted(f for f in os.listdir(os.path.join(self.dir, "cap"))
                       if f != ".shardcheck-capture.lock")
        return p.returncode, p.stdout, p.stderr, files

    def test_ranks_the_program_spawns_are_each_captured_and_its_launcher_leaves_no_file(self):
        code, out, err, files = self.capture_spawning()
        self.assertEqual(code, 0, out + err)
        self.assertEqual(files, ["rank-0.jsonl", "rank-1.jsonl"])
        for r in range(2):
            path = os.path.join(self.dir, "cap", "rank-%d.jsonl" % r)
            with open(path) as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual((rows[0]["rank"], rows[0]["world_size"]), (r, 2))
            self.assertEqual(sum(row.get("k") == "coll" for row in rows), 2)
            self.assertNotIn("partial", rows[-1])
        self.assertIn("cap: 2 rank files, started by the program", err)
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("clean   cap: no findings", out)

    def test_spawned_ranks_that_fail_are_still_checked_and_never_clean(self):
        code, out, err, files = self.capture_spawning("--swap")
        self.assertNotEqual(code, 0)
        self.assertEqual(files, ["rank-0.jsonl", "rank-1.jsonl"])
        self.assertIn("the program's ranks failed (ProcessExitedException", err)
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("[collective_mismatch]", out)
            self.assertIn("at spawns.py:10", out)  # the first all_reduce
            self.assertIn("PARTIAL cap: found collective_mismatch", out)

    def capture_processes(self, method, *extra):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return self.capture_spawning(str(port), method, *extra, program="processes.py")

    def test_processes_the_program_starts_become_ranks_at_init_and_its_launcher_leaves_none(self):
        for method in ("spawn", "fork"):
            with self.subTest(method=method):
                shutil.rmtree(os.path.join(self.dir, "cap"), ignore_errors=True)
                code, out, err, files = self.capture_processes(method)
                self.assertEqual(code, 0, out + err)
                self.assertEqual(files, ["rank-0.jsonl", "rank-1.jsonl"])
                for r in range(2):
                    with open(os.path.join(self.dir, "cap", "rank-%d.jsonl" % r)) as f:
                        rows = [json.loads(line) for line in f]
                    self.assertEqual((rows[0]["rank"], rows[0]["world_size"]), (r, 2))
                    self.assertEqual(sum(row.get("k") == "coll" for row in rows), 2)
                    self.assertEqual(rows[-1]["k"], "end")
                    self.assertNotIn("partial", rows[-1])
                self.assertIn("cap: 2 rank files, started by the program", err)
                if os.environ.get("SHARDCHECK_BIN"):
                    self.assertIn("clean   cap: no findings", out)

    def test_a_collective_mismatch_between_started_processes_is_found_at_its_line(self):
        code, out, err, files = self.capture_processes("spawn", "--swap")
        self.assertNotEqual(code, 0)
        self.assertEqual(files, ["rank-0.jsonl", "rank-1.jsonl"])
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("[collective_mismatch]", out)
            self.assertIn("at processes.py:7", out)  # the first all_reduce

    def test_a_process_that_is_no_rank_leaves_the_programs_own_file(self):
        code, out, err, files = self.capture_spawning(program="worker_process.py")
        self.assertEqual(code, 0, out + err)
        self.assertEqual(files, ["rank-0.jsonl"])
        with open(os.path.join(self.dir, "cap", "rank-0.jsonl")) as f:
            names = [json.loads(line).get("name") for line in f]
        self.assertIn("aten::mul", names)  # the program's
        self.assertNotIn("aten::add_", names)  # the worker's

    def test_a_cross_group_deadlock_ends_after_the_timeout_and_is_named_with_its_lines(self):
        start = time.monotonic()
        code, out, err = self.run_launch("cross_group.py", check=bool(os.environ.get("SHARDCHECK_BIN")))
        self.assertLess(time.monotonic() - start, 60, "a hang must end after the timeout")
        ends = self.rank_ends()
        self.assertTrue(all(e is not None and "partial" in e for e in ends), ends)
        self.assertTrue(any(e["partial"].startswith("hung: 4 s inside") for e in ends), ends)
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertEqual(code, 1, out + err)
            self.assertIn("[deadlock]", out)
            self.assertIn("at cross_group.py:7", out)
            self.assertIn("PARTIAL cap: found deadlock", out)

    def test_a_rank_that_raises_leaves_its_exception_and_line_and_the_program_is_not_clean(self):
        code, out, err = self.run_launch("raises.py", check=bool(os.environ.get("SHARDCHECK_BIN")))
        self.assertNotEqual(code, 0)
        ends = self.rank_ends()
        self.assertEqual(ends[2]["partial"], "raised ValueError: rank 2 cannot go on")
        self.assertTrue(all(e is not None and "partial" in e for e in ends), ends)
        if os.environ.get("SHARDCHECK_BIN"):
            self.assertIn("rank 2: raised ValueError: rank 2 cannot go on at raises.py:6", out)
            self.assertNotIn("clean   cap", out)

    def test_sigterm_to_the_launcher_ends_every_rank_with_its_file_whole(self):
        p = self.launch("slow.py", check=False)
        self.wait_for_first_collectives()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        ends = self.rank_ends()
        self.assertTrue(all(e is not None and e["partial"].startswith("stopped by SIGTERM")
                            for e in ends), ends)

    def test_a_programs_own_sigterm_handler_runs_to_its_end_and_the_files_end_with_it(self):
        p = self.launch("handles_term.py", check=False)
        self.wait_for_first_collectives()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        for r in range(4):
            self.assertEqual(text_of(os.path.join(self.dir, "ckpt-%d" % r)), "saved", err)
        self.assertEqual(self.rank_ends(), [{"k": "end", "records": e["records"]}
                                            for e in self.rank_ends()])

    def wait_for_first_collectives(self):
        deadline = time.monotonic() + 60
        cap = os.path.join(self.dir, "cap")
        while time.monotonic() < deadline:
            files = [os.path.join(cap, "rank-%d.jsonl" % r) for r in range(4)]
            if all(os.path.exists(f) and '"coll"' in text_of(f) for f in files):
                break
            time.sleep(0.1)
        time.sleep(0.5)

    def test_a_rank_killed_outright_leaves_what_it_recorded_and_the_others_are_ended(self):
        p = self.launch("slow.py", check=False)
        deadline = time.monotonic() + 60
        pid_of_rank3 = None
        while time.monotonic() < deadline and pid_of_rank3 is None:
            for line in subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True,
                                       text=True).stdout.splitlines()[1:]:
                pid, ppid, args = line.split(None, 2)
                if int(ppid) == p.pid and "slow.py" in args:
                    f = os.path.join(self.dir, "cap", "rank-3.jsonl")
                    if os.path.exists(f) and '"coll"' in text_of(f):
                        env = text_of("/proc/%s/environ" % pid, "rb").split(b"\0")
                        if b"RANK=3" in env:
                            pid_of_rank3 = int(pid)
            time.sleep(0.1)
        self.assertIsNotNone(pid_of_rank3)
        os.kill(pid_of_rank3, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("rank 3 ended badly (killed by SIGKILL)", err)
        ends = self.rank_ends()
        self.assertIsNone(ends[3])  # killed outright: no end record, but its collective is there
        self.assertIn('"coll"', text_of(os.path.join(self.dir, "cap", "rank-3.jsonl")))
        self.assertTrue(all(e is not None and "partial" in e for e in ends[:3]), ends)
        shardcheck = os.environ.get("SHARDCHECK_BIN")
        if shardcheck:
            r = subprocess.run([shardcheck, "run", os.path.join(self.dir, "cap")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("rank 3: the file ends without its end record", r.stdout)


if __name__ == "__main__":
    unittest.main()
