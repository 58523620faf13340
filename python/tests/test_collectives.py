"""Collectives in captured programs, on CPU ranks over gloo, each verdict against ground truth
established without shardcheck (the ranks run as plain processes):

- A collective is recorded whatever its backend then does (collectives.py, hooks.py): the list
  forms of all_gather (examples/pytorch/uneven_gather.py), gather and scatter, and a collective
  C++ issues through the dispatcher, whose sizes differ across ranks, fail or corrupt the program
  without the capture, and with it the checker names each rank's size and line, though the
  capture is partial.
- A swap is decided by where each rank's tensor was made (recorder.py): two tensors allocated at
  one line, all-reduced in a loop whose order differs on one rank of a 2x2 mesh's row
  (examples/pytorch/swap_loop.py), and parameters made before the capture, reduced in another
  order on one rank, give results that differ from a single-process reference, and the checker
  names both tensors' origins; their fixes match the reference and check clean.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PYROOT)

try:
    import torch
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    torch = None
    HAVE_GLOO = False

# Each rank's tensor has 4 elements on rank 0 and 8 on the others (with "--fix", one size on
# every rank); each prints its result as one JSON line. Line numbers are asserted: keep them in
# place. (The all_gather into lists is examples/pytorch/uneven_gather.py.)
PROGRAMS = {
    "gather.py": """
import json, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
n = 4 if rank == 0 or "--fix" in sys.argv else 8
t = torch.full((n,), float(rank + 1))
outs = [torch.zeros(n) for _ in range(world)] if rank == 0 else None
dist.gather(t, outs, dst=0)  # line 8
print(json.dumps([o.tolist() for o in outs] if outs else []), flush=True)
""",
    # The root scatters 8 elements to each rank; the others expect 4 (with --fix, 8).
    "scatter.py": """
import json, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
n = 8 if rank == 0 or "--fix" in sys.argv else 4
t = torch.zeros(n)
ins = [torch.full((n,), float(p + 1)) for p in range(world)] if rank == 0 else None
dist.scatter(t, ins, src=0)  # line 8
print(json.dumps(t.tolist()), flush=True)
""",
    # C++ broadcasts the flattened tensors (as DDP syncs its parameters): the c10d operator
    # reaches the capture through the dispatcher, not a torch.distributed function.
    "coalesced.py": """
import json, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
n = 4 if rank == 0 or "--fix" in sys.argv else 8
params = [torch.full((n,), float(rank + 1))]
dist._broadcast_coalesced(dist.group.WORLD, params, 1 << 20, 0)  # line 7
print(json.dumps(params[0].tolist()), flush=True)
""",
    # Two layers of one shape made before the capture; inside it every rank averages their
    # weights over the world, rank 1 in the other order (with --fix, one order).
    "parameters.py": """
import json, sys
import torch, torch.distributed as dist
from shardcheck import capture
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 8), "b": torch.nn.Linear(8, 8)})
before = {k: p.detach().clone() for k, p in model.named_parameters()}
with capture(sys.argv[1], device="cpu"):
    order = [model["a"].weight, model["b"].weight]
    if rank == 1 and "--fix" not in sys.argv:
        order.reverse()
    with torch.no_grad():
        for w in order:
            dist.all_reduce(w)  # line 15
            w /= world
print(json.dumps({"before": {k: v.tolist() for k, v in before.items()},
                  "after": {k: p.tolist() for k, p in model.named_parameters()}}), flush=True)
""",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_plain(script, ranks, args=(), timeout=60, cwd=None, env=None):
    """Runs `script` as `ranks` plain processes (torchrun's environment, no capture): each rank's
    exit status ("timeout" for one still running after `timeout` s, then killed) and its last
    stdout line parsed as JSON (None if it printed none)."""
    port = str(free_port())
    procs = []
    for r in range(ranks):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                 **(env or {}))
        procs.append(subprocess.Popen([sys.executable, script] + list(args), cwd=cwd, env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    end = time.monotonic() + timeout
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.1, end - time.monotonic()))
            status = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            status = "timeout"
        lines = out.strip().splitlines()
        results.append((status, json.loads(lines[-1]) if lines else None))
    return results


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class CollectiveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        for name, text in PROGRAMS.items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text.lstrip())

    def tearDown(self):
        self.tmp.cleanup()

    def capture(self, script, ranks, *args, cwd=None, name="cap"):
        out = os.path.join(self.dir, name)
        cmd = [sys.executable, "-m", "shardcheck.capture", "--nproc-per-node", str(ranks),
               "--device", "cpu", "--out", out, "--timeout", "30", "--", script] + list(args)
        subprocess.run(cmd, cwd=cwd or self.dir, env=dict(os.environ, PYTHONPATH=PYROOT),
                       capture_output=True, text=True, timeout=300)
        return out

    def verdict(self, cap):
        shardcheck = os.environ.get("SHARDCHECK_BIN")
        if not shardcheck:
            self.skipTest("no SHARDCHECK_BIN")
        p = subprocess.run([shardcheck, "run", cap], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr

    def fails_without_capture(self, script, ranks=2):
        """Ground truth: run plainly, some rank fails (raises, aborts or hangs) or the ranks'
        results are not what the call means; with --fix every rank ends well."""
        broken = run_plain(os.path.join(self.dir, script), ranks, timeout=30)
        fixed = run_plain(os.path.join(self.dir, script), ranks, ["--fix"], timeout=30)
        self.assertTrue(any(status != 0 for status, _ in broken), broken)
        self.assertEqual([status for status, _ in fixed], [0] * ranks, fixed)
        return fixed

    # -- recorded before the backend has it ----------------------------------------------------
    def test_an_all_gather_into_lists_of_different_sizes_fails_and_is_named_with_each_size(self):
        script = os.path.join(REPO, "examples", "pytorch", "uneven_gather.py")
        broken = run_plain(script, 2, cwd=REPO)
        fixed = run_plain(script, 2, ["--fix"], cwd=REPO)
        self.assertTrue(any(status != 0 for status, _ in broken), broken)  # gloo aborts a rank
        # what the call means: every rank's scores, on every rank
        reference = [[float(i + 100 * r) for i in range(4 if r == 0 else 8)] for r in range(2)]
        self.assertEqual(fixed, [(0, reference), (0, reference)])
        path = "examples/pytorch/uneven_gather.py"
        code, out = self.verdict(self.capture(path, 2, cwd=REPO))
        self.assertEqual(code, 1, out)
        self.assertIn("[collective_mismatch] collective #0 of group 'world' differs", out)
        self.assertIn("rank 0: all_gather 'torch.distributed.all_gather' at %s:27" % path, out)
        self.assertIn("[all_gather f32 4->8 on world [0,1]]", out)
        self.assertIn("rank 1: all_gather 'torch.distributed.all_gather' at %s:27" % path, out)
        self.assertIn("[all_gather f32 8->16 on world [0,1]]", out)
        self.assertIn("make every member pass the same element counts (rank 0 passes 4 in, 8 out, "
                      "rank 1 8 in, 16 out)", out)
        self.assertIn("PARTIAL cap: found collective_mismatch", out)
        code, out = self.verdict(self.capture(path, 2, "--fix", cwd=REPO, name="fix"))
        self.assertEqual(code, 0, out)

    def test_a_gather_and_a_scatter_of_different_sizes_fail_and_name_both_sides(self):
        for script, sender, receiver, sent, received in (("gather.py", 1, 0, 32, 16),
                                                          ("scatter.py", 0, 1, 32, 16)):
            with self.subTest(script):
                self.fails_without_capture(script)
                code, out = self.verdict(self.capture(script, 2, name=script[:-3]))
                self.assertEqual(code, 1, out)
                what = "torch.distributed." + script[:-3]
                self.assertIn("[collective_mismatch] p2p transfer #0 differs", out)
                self.assertIn("rank %d: send '%s' to %d at %s:8  [p2p %d bytes"
                              % (sender, what, receiver, script, sent), out)
                self.assertIn("rank %d: recv '%s' from %d at %s:8  [p2p %d bytes"
                              % (receiver, what, sender, script, received), out)
                code, out = self.verdict(self.capture(script, 2, "--fix", name=script[:-3] + "-fix"))
                self.assertEqual(code, 0, out)

    def test_a_collective_cpp_issues_through_the_dispatcher_is_recorded_with_its_size(self):
        broken = run_plain(os.path.join(self.dir, "coalesced.py"), 2, timeout=30)
        # gloo moves what fits without an error: rank 1 keeps half of its own values, where the
        # broadcast means rank 0's values on every rank
        self.assertEqual([status for status, _ in broken], [0, 0], broken)
        self.assertNotEqual(broken[1][1], broken[0][1])
        fixed = run_plain(os.path.join(self.dir, "coalesced.py"), 2, ["--fix"], timeout=30)
        self.assertEqual(fixed[1][1], fixed[0][1])
        code, out = self.verdict(self.capture("coalesced.py", 2))
        self.assertEqual(code, 1, out)
        self.assertIn("rank 0: broadcast 'c10d::broadcast_' at coalesced.py:7  [broadcast f32 4->4",
                      out)
        self.assertIn("rank 1: broadcast 'c10d::broadcast_' at coalesced.py:7  [broadcast f32 8->8",
                      out)
        code, out = self.verdict(self.capture("coalesced.py", 2, "--fix", name="fix"))
        self.assertEqual(code, 0, out)

    # -- swaps by where each tensor was made ---------------------------------------------------
    def swap_loop_results(self, *args):
        return run_plain(os.path.join(REPO, "examples", "pytorch", "swap_loop.py"), 4, args,
                         cwd=REPO)

    def test_a_loop_over_a_rank_dependent_order_swaps_tensors_of_one_line(self):
        # the single-process reference: each rank's k-th gradient summed over its row
        rows = [[0, 1], [0, 1], [2, 3], [2, 3]]
        reference = [[sum(10.0 * k + m + 1 for m in rows[r]) for k in range(2)] for r in range(4)]
        broken, fixed = self.swap_loop_results(), self.swap_loop_results("--fix")
        self.assertEqual([s for s, _ in broken + fixed], [0] * 8, broken + fixed)
        self.assertEqual([r["grads"] for _, r in fixed], reference)
        wrong = [r["rank"] for _, r in broken if r["grads"] != reference[r["rank"]]]
        self.assertEqual(wrong, [0, 1])  # the row with the swap; the other row is right
        path = "examples/pytorch/swap_loop.py"
        code, out = self.verdict(self.capture(path, 4, cwd=REPO))
        self.assertEqual(code, 1, out)
        self.assertIn("[collective_swap] collective #0 of group", out)
        self.assertIn("(torch.distributed.all_reduce of the 1st tensor allocated at %s:38 vs "
                      "torch.distributed.all_reduce of the 2nd tensor allocated at %s:38)"
                      % (path, path), out)
        self.assertIn("rank 1: all_reduce 'torch.distributed.all_reduce' at %s:43 on the 2nd "
                      "tensor allocated at %s:38" % (path, path), out)
        self.assertNotIn("rank 2", out)  # the other row agrees
        code, out = self.verdict(self.capture(path, 4, "--fix", cwd=REPO, name="fix"))
        self.assertEqual(code, 0, out)

    def test_parameters_made_before_the_capture_are_named_in_a_swap(self):
        def averaged(results, k):
            # the single-process reference: the mean over the ranks of their initial values
            befores = [torch.tensor(r["before"][k]) for _, r in results]
            return torch.stack(befores).mean(0)

        for fix in ([], ["--fix"]):
            results = run_plain(os.path.join(self.dir, "parameters.py"), 2,
                                [os.path.join(self.dir, "cap" + "".join(fix))] + fix,
                                env={"PYTHONPATH": PYROOT})
            self.assertEqual([s for s, _ in results], [0, 0], results)
            close = all(torch.allclose(torch.tensor(r["after"][k]), averaged(results, k))
                        for _, r in results for k in ("a.weight", "b.weight"))
            self.assertEqual(close, bool(fix))
        code, out = self.verdict(os.path.join(self.dir, "cap"))
        self.assertEqual(code, 1, out)
        self.assertIn("the ranks exchange different tensors (torch.distributed.all_reduce of "
                      "parameter 'a.weight' vs torch.distributed.all_reduce of parameter "
                      "'b.weight')", out)
        self.assertIn("parameters.py:15 on parameter 'a.weight'", out)
        code, out = self.verdict(os.path.join(self.dir, "cap--fix"))
        self.assertEqual(code, 0, out)


HANG_PROGRAM = r"""
import json, os, sys, threading
import torch, torch.distributed as dist
sys.path.insert(0, os.environ["PYROOT"])
from shardcheck.capture.collectives import Call
from shardcheck.capture.hooks import Hooks, _Described, _PendingCollective
from shardcheck.capture.recorder import Recorder
dist.init_process_group("gloo", rank=0, world_size=1)
rec = Recorder(sys.argv[1], {"rank": 0, "world_size": 1}, sees_frees=False)
hooks = Hooks(rec, "cpu")
t = torch.ones(4)
calls = [Call("all_reduce", t, t, 4)]
pending = _PendingCollective(hooks, "c10d::allreduce_", None, (), {},
                             _Described(calls, dist.group.WORLD, "sum", 0, None, 0), 0,
                             hooks.site(), None, [])


def collective():
    hooks._enter_collective("c10d::allreduce_", pending)  # the main thread sits inside it
    watchdog = threading.Thread(target=hooks.flush_in_flight, name="shardcheck-capture")
    watchdog.start()
    watchdog.join()
    pending.write(ran=True)  # the call returned after all: written once


collective()
rec.close("hung")
"""


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class HungCollectiveTest(unittest.TestCase):
    def test_the_watchdog_writes_the_collective_a_rank_hangs_in_once_as_the_main_threads(self):
        with tempfile.TemporaryDirectory() as d:
            script, path = os.path.join(d, "hang.py"), os.path.join(d, "rank-0.jsonl")
            with open(script, "w") as f:
                f.write(HANG_PROGRAM)
            p = subprocess.run([sys.executable, script, path], capture_output=True, text=True,
                               env=dict(os.environ, PYROOT=PYROOT, MASTER_ADDR="127.0.0.1",
                                        MASTER_PORT=str(free_port())), timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(path) as f:
                kinds = [json.loads(line).get("k") for line in f.read().splitlines()[1:]]
            self.assertEqual(kinds.count("coll"), 1)
            self.assertNotIn("thread", kinds)  # the main thread's, though the watchdog wrote it
            self.assertNotIn("value", kinds)


if __name__ == "__main__":
    unittest.main()
