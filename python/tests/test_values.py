"""Value capture (shardcheck/capture/values.py): the digest tells equal tensors from different
ones without a copy to the host, and the reproducers of examples/pytorch, captured at 2 CPU
ranks over gloo by the launcher, give their findings at their lines while their fixes, and a
capture with --no-values, give none."""

import json
import os
import subprocess
import sys
import tempfile
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


@unittest.skipUnless(torch is not None, "torch is not installed")
class DigestTest(unittest.TestCase):
    def record(self, t):
        from shardcheck.capture.values import as_record, digest
        return as_record(digest(t).tolist())

    def test_equal_bytes_give_equal_digests_and_any_change_another(self):
        a = torch.arange(10000, dtype=torch.float32) / 7
        b = a.clone()
        self.assertEqual(self.record(a), self.record(b))
        b[9999] += 1e-3
        self.assertNotEqual(self.record(a)["h"], self.record(b)["h"])
        c = a.clone()
        c[[0, 1]] = c[[1, 0]]  # the same values in another order
        self.assertNotEqual(self.record(a)["h"], self.record(c)["h"])

    def test_sums_tell_rounding_from_a_real_difference(self):
        a = torch.randn(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        r = self.record(a)
        self.assertAlmostEqual(r["s"], a.sum().item(), places=6)
        self.assertAlmostEqual(r["a"], a.abs().sum().item(), places=6)
        self.assertEqual(r["n"], 4096)

    def test_one_repeated_value_is_uniform_and_views_odd_sizes_and_empties_work(self):
        self.assertTrue(self.record(torch.zeros(33))["u"])
        self.assertFalse(self.record(torch.arange(3, dtype=torch.int8))["u"])  # 3 bytes: bytewise
        self.assertEqual(self.record(torch.ones(6, 4)[:, 1])["n"], 6)  # a strided view
        self.assertEqual(self.record(torch.empty(0))["n"], 0)
        self.assertIsNone(self.record(torch.tensor([1.0, float("nan")]))["s"])  # JSON has no NaN


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class ReproducerTest(unittest.TestCase):
    def capture(self, d, name, script, *args, values=True, ranks=2):
        out = os.path.join(d, name)
        cmd = [sys.executable, "-m", "shardcheck.capture", "--nproc-per-node", str(ranks), "--device", "cpu",
               "--out", out, "--timeout", "60"] + ([] if values else ["--no-values"])
        p = subprocess.run(cmd + ["--", os.path.join("examples", "pytorch", script)] + list(args),
                           cwd=REPO, env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return out

    def verdict(self, cap):
        shardcheck = os.environ.get("SHARDCHECK_BIN")
        if not shardcheck:
            self.skipTest("no SHARDCHECK_BIN")
        p = subprocess.run([shardcheck, "run", cap], capture_output=True, text=True)
        return p.returncode, p.stdout

    def found_and_fixed(self, script, finding, *args, ranks=2):
        """The reproducer `script` (with `args`) is found with `finding` in what shardcheck says,
        and with --fix is clean."""
        with tempfile.TemporaryDirectory() as d:
            code, out = self.verdict(self.capture(d, "bug", script, *args, ranks=ranks))
            self.assertEqual(code, 1, out)
            self.assertIn(finding, out)
            code, out = self.verdict(self.capture(d, "fix", script, *args, "--fix", ranks=ranks))
            self.assertEqual(code, 0, out)

    def test_a_parameter_left_out_of_the_reduction_drifts_and_the_fix_does_not(self):
        self.found_and_fixed("replica_drift.py",
                             "[missing_reduction] head.weight, head.bias: the same on ranks 0, 1 before "
                             "the optimizer step at examples/pytorch/replica_drift.py:57")

    def test_a_schedule_stepped_on_one_rank_drifts_and_the_fix_does_not(self):
        self.found_and_fixed("replica_drift.py",
                             "[replica_divergence] body.0.weight, body.0.bias, head.weight and 1 more: the "
                             "same on ranks 0, 1 before the optimizer step at "
                             "examples/pytorch/replica_drift.py:57 (step 1)", "--scheduler")

    def test_expert_gradients_divided_by_their_groups_size_are_a_divisor_mismatch(self):
        # The all_to_all brought each expert every rank's tokens: its sum over its expert-data-
        # parallel group of 2 carries the losses of all 4 ranks, and is averaged by dividing by 4.
        self.found_and_fixed("expert_parallel.py",
                             "[divisor_mismatch] all_reduce (sum) at examples/pytorch/expert_parallel.py:91 "
                             "over ranks 0, 2, divided by 2 at examples/pytorch/expert_parallel.py:92: the "
                             "sum carries the losses of 4 ranks (0, 1, 2, 3), so their average divides by "
                             "4, not 2", ranks=4)

    def test_a_tied_embedding_counted_on_both_stages_is_a_norm_miscount(self):
        self.found_and_fixed("tied_norm.py",
                             "[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tied_norm.py:62 "
                             "over ranks 0, 1 adds up terms computed from the gradient of 'shared'")

    def test_a_layernorm_every_tensor_parallel_rank_holds_is_counted_once_per_rank(self):
        self.found_and_fixed("tp_norm.py",
                             "[grad_norm_miscount] all_reduce (sum) at examples/pytorch/tp_norm.py:87 "
                             "over ranks 0, 1 adds up terms computed from the gradient of 'norm.weight', "
                             "'norm.bias'")

    def test_a_norm_over_main_grad_counts_the_layernorm_once_per_rank_and_the_reference_says_so(self):
        # Ground truth first: the bug's norm exceeds clip_grad_norm_'s on one process, the fix's
        # equals it; then shardcheck finds the bug at the norm's all_reduce and the fix clean.
        for flag, bigger in (("", True), ("--fix", False)):
            norm, ref = self.truth("main_grad_norm.py", flag)
            if bigger:
                self.assertGreater(norm, ref * 1.1)
            else:
                self.assertAlmostEqual(norm / ref, 1.0, places=5)
        self.found_and_fixed("main_grad_norm.py",
                             "[grad_norm_miscount] all_reduce (sum) at examples/pytorch/main_grad_norm.py:71 "
                             "over ranks 0, 1 adds up terms computed from the gradient of 'weight', 'bias'")

    def truth(self, script, *args):
        """`script --check-truth` uncaptured at 2 ranks over gloo: (its norm, the reference's)."""
        procs = []
        port = str(29700 + os.getpid() % 200)
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            cmd = [sys.executable, os.path.join("examples", "pytorch", script), "--check-truth"]
            procs.append(subprocess.Popen(cmd + [a for a in args if a], cwd=REPO, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outs = [p.communicate(timeout=120) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outs)
        words = outs[0][0].split()
        return float(words[words.index("norm") + 1]), float(words[words.index("reference") + 1])

    def test_an_accumulator_summed_into_before_it_was_written_is_found_at_its_first_read(self):
        # The never-written bytes reach the parameters through the all-reduce and the update:
        # the finding names the torch.empty buffer and the += that first read it.
        self.found_and_fixed("uninit_accumulator.py",
                             "computed from never-written bytes of 'tensor allocated at "
                             "examples/pytorch/uninit_accumulator.py:27', first read by aten::add_ at "
                             "examples/pytorch/uninit_accumulator.py:31")

    def test_a_gradient_summed_twice_is_found_and_the_fix_and_no_values_are_clean(self):
        with tempfile.TemporaryDirectory() as d:
            code, out = self.verdict(self.capture(d, "double", "double_reduction.py"))
            self.assertEqual(code, 1, out)
            self.assertIn("[double_reduction] all_reduce (sum) at "
                          "examples/pytorch/double_reduction.py:66 over ranks 0, 1 adds up copies of what "
                          "all_reduce at examples/pytorch/double_reduction.py:42 already made whole on each "
                          "of them: the result counts every rank's loss 2 times", out)
            self.assertNotIn("collective_swap", out)
            code, out = self.verdict(self.capture(d, "fix", "double_reduction.py", "--fix"))
            self.assertEqual(code, 0, out)
            cap = self.capture(d, "off", "double_reduction.py", values=False)
            with open(os.path.join(cap, "rank-0.jsonl")) as f:
                kinds = {json.loads(line)["k"] for line in f if line.startswith("{\"k\"")}
            self.assertNotIn("value", kinds)
            self.assertIn("coll", kinds)
            code, out = self.verdict(cap)
            self.assertEqual(code, 0, out)  # nothing to see the double reduction with


if __name__ == "__main__":
    unittest.main()
