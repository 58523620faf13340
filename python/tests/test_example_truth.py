"""Ground truth of the examples of examples/pytorch and of the hand-written capture fixtures,
established without shardcheck: every CPU-checkable program runs uncaptured over gloo as its bug
and as its fix, and this test asserts what each showed: the bug its effect, the fix none.

- Value bugs measure themselves (--check-truth OUT.json, examples/pytorch/_ground_truth.py):
  gradients against a single-process reference of the global loss, replicas across ranks, a norm
  against clip_grad_norm_ of the reference.
- Races: the values an in-place race or an early use of a transfer left, over several runs.
- Order bugs, a dtype mismatch and deadlocks: the printed values against the sums, and for a hang
  where each rank still waits, SECONDS after its group was made, in faulthandler's traceback.
- The uninitialized accumulator: what torch.empty handed over, and the accumulator against the
  fix's run with the same seed.

Most programs run as jobs of one set of 2 rank processes (_example_truth_ranks.py), the 4-rank
one in another, each hang in a set of its own, side by side; one program also runs through its
own script. examples/pytorch/README.md and tests/capture/fixtures/README.md have the tables."""

import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(REPO, "examples", "pytorch")
FIXTURES = os.path.join(REPO, "tests", "capture", "fixtures")

try:
    import torch
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
    HAVE_DTENSOR = hasattr(torch.distributed, "device_mesh")
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    HAVE_GLOO = HAVE_DTENSOR = False

ROUNDING = 1e-4  # float32 programs against a float64 reference
RACE_RUNS = 3  # runs of each racy program; each has 2 steps on each of 2 ranks
WATCHDOG_S = 6  # how long a hang is watched once its group is made
ENTRY = "tied_norm"  # also run through its own script


def example(name):
    return os.path.join("examples", "pytorch", name + ".py")


FIXTURE_PROGRAMS = os.path.join("python", "tests", "_fixture_programs.py")


def jobs_2():
    """The 2-rank jobs: (name, script, args, writes a record)."""
    out = []
    for flags, suffix in (([], ""), (["--fix"], "-fix")):
        for name in ("replica_drift", "double_reduction", "tied_norm", "tp_norm", "uninit_accumulator"):
            out.append((name + suffix, example(name), flags, True))
        out.append(("replica_drift-scheduler" + suffix, example("replica_drift"), ["--scheduler"] + flags, True))
        if HAVE_DTENSOR:
            out.append(("dtensor_tp" + suffix, example("dtensor_tp"), flags, True))
        out.append(("collective_order_bug" + suffix, example("collective_order_bug"), flags, False))
        for run in range(RACE_RUNS):
            out.append(("gloo_inplace_race%s-%d" % (suffix, run), example("gloo_inplace_race"), flags, True))
            for early in ("--read-early", "--write-early"):
                out.append(("p2p_ring%s%s-%d" % (early[1:], suffix, run), example("p2p_ring"), [early] + flags,
                            False))
    out.append(("cross_group_deadlock-fix", example("cross_group_deadlock"), ["--fix"], False))
    out.append(("p2p-batch", FIXTURE_PROGRAMS, ["--case", "p2p-deadlock", "--batch"], False))
    out.append(("mismatch-dtype-fix", FIXTURE_PROGRAMS, ["--case", "mismatch-dtype", "--fix"], False))
    # Last: a mismatch of the bytes gloo exchanges would garble whatever came after it.
    out.append(("mismatch-dtype", FIXTURE_PROGRAMS, ["--case", "mismatch-dtype"], False))
    return out


def jobs_4():
    return [("expert_parallel", example("expert_parallel"), [], True),
            ("expert_parallel-fix", example("expert_parallel"), ["--fix"], True)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(world, argv, out, name):
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    procs = []
    for r in range(world):
        log = open(os.path.join(out, "%s.rank-%d.log" % (name, r)), "w")
        procs.append((subprocess.Popen([sys.executable] + argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                       env=dict(env, RANK=str(r), LOCAL_RANK=str(r))), log))
    return procs


def write_jobs(out, name, jobs):
    path = os.path.join(out, name + ".jobs.json")
    with open(path, "w") as f:
        json.dump([{"name": n, "script": s, "args": a, "truth": t} for n, s, a, t in jobs], f)
    return path


def end_when_every_rank_printed(procs, prefix, deadline_s=240):
    """Kills the ranks of a watched hang once each has printed where it waits (or one ended, or
    the deadline passed)."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        printed = 0
        for r in range(len(procs)):
            with open("%s.rank-%d.log" % (prefix, r)) as f:
                printed += "most recent call first" in f.read()
        if printed == len(procs) or any(p.poll() is not None for p, _ in procs):
            break
        time.sleep(0.2)
    for p, _ in procs:
        if p.poll() is None:
            p.kill()


def line_of(path, text):
    """The line of `path` (from the repository's root) where `text` begins; it must occur once."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        source = f.read()
    at = source.index(text)
    assert source.find(text, at + 1) < 0, text
    return source.count("\n", 0, at) + 1


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class ExampleTruthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        out = cls.out = cls.tmp.name
        driver = os.path.join(HERE, "_example_truth_ranks.py")
        watchdog = [driver, "--watchdog", str(WATCHDOG_S)]
        sets = {name: start(world, argv, out, name) for name, world, argv in (
            ("jobs2", 2, [driver, out, write_jobs(out, "jobs2", jobs_2())]),
            ("jobs4", 4, [driver, out, write_jobs(out, "jobs4", jobs_4())]),
            ("hang-cross_group_deadlock", 2, watchdog + [example("cross_group_deadlock")]),
            ("hang-p2p-deadlock", 2, watchdog + [FIXTURE_PROGRAMS, "--case", "p2p-deadlock"]),
            ("entry", 2, [example(ENTRY), "--check-truth", os.path.join(out, "entry.json")]))}
        cls.codes = {}
        try:
            for name, procs in sets.items():
                if name.startswith("hang-"):
                    end_when_every_rank_printed(procs, os.path.join(out, name))
                cls.codes[name] = [p.wait(timeout=300) for p, _ in procs]
        finally:
            for procs in sets.values():
                for p, log in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                    log.close()
        cls.logs = {}
        for path in glob.glob(os.path.join(out, "*.log")):
            with open(path) as f:
                cls.logs[os.path.basename(path)[:-4]] = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def everything(self):
        return "\n".join("== %s\n%s" % (k, v[-3000:]) for k, v in sorted(self.logs.items()))

    def record(self, name):
        self.assertEqual(self.codes["jobs2"] + self.codes["jobs4"], [0] * 6, self.everything())
        path = os.path.join(self.out, name + ".json")
        self.assertTrue(os.path.exists(path), "no record of %s\n%s" % (name, self.everything()))
        with open(path) as f:
            return json.load(f)

    def printed(self, job):
        """Each rank's output of a job, and its exit status."""
        self.assertEqual(self.codes["jobs2"], [0, 0], self.everything())
        out = []
        for r in range(2):
            prefix = os.path.join(self.out, "%s.rank-%d" % (job, r))
            with open(prefix + ".out") as f, open(prefix + ".code") as c:
                out.append((f.read(), c.read().strip()))
        return out

    def assertFactor(self, summary, factor):
        """Every compared gradient is `factor` times its reference, up to rounding."""
        self.assertAlmostEqual(summary["factor_min"], factor, delta=ROUNDING, msg=summary)
        self.assertAlmostEqual(summary["factor_max"], factor, delta=ROUNDING, msg=summary)
        self.assertLess(summary["residual_max"], ROUNDING, summary)

    # Value bugs: a single-process reference of the global loss, replicas across ranks.

    def test_replica_drift_steps_the_head_with_each_ranks_own_gradient_and_the_heads_drift(self):
        bug = self.record("replica_drift")
        self.assertEqual(bug["initial_spread"], 0.0)
        self.assertFactor(bug["body"], 1.0)
        self.assertGreater(bug["head"]["residual_max"], 0.1, bug["head"])  # each rank's own batch
        for spread in bug["param_spread"]:
            self.assertEqual(spread["body"], 0.0)
            self.assertGreater(spread["head"], 1e-3)
        fix = self.record("replica_drift-fix")
        self.assertFactor(fix["body"], 1.0)
        self.assertFactor(fix["head"], 1.0)
        self.assertEqual({v for s in fix["param_spread"] for v in s.values()}, {0.0})

    def test_replica_drift_scheduler_steps_equal_gradients_with_unequal_rates_and_drifts(self):
        bug = self.record("replica_drift-scheduler")
        self.assertFactor(bug["body"], 1.0)
        self.assertFactor(bug["head"], 1.0)
        self.assertEqual(set(bug["grad_spread"]), {0.0})  # the same gradients on both ranks ...
        rates = bug["lr_by_rank"]
        self.assertEqual(rates[0][0], rates[1][0])
        self.assertNotEqual(rates[0][1], rates[1][1])  # ... stepped at other rates from step 2
        self.assertEqual(set(bug["param_spread"][0].values()), {0.0})
        self.assertGreater(min(bug["param_spread"][-1].values()), 1e-4)
        fix = self.record("replica_drift-scheduler-fix")
        self.assertEqual(fix["lr_by_rank"][0], fix["lr_by_rank"][1])
        self.assertEqual({v for s in fix["param_spread"] for v in s.values()}, {0.0})

    def test_double_reduction_steps_the_experts_with_twice_their_gradient(self):
        bug = self.record("double_reduction")
        self.assertFactor(bug["experts"], 2.0)  # averaged, then summed over 2 ranks again
        self.assertFactor(bug["router"], 1.0)
        self.assertEqual(set(bug["param_spread"].values()), {0.0})  # nothing diverges
        fix = self.record("double_reduction-fix")
        self.assertFactor(fix["experts"], 1.0)
        self.assertFactor(fix["router"], 1.0)

    def test_expert_parallel_divides_the_experts_sum_by_2_where_it_carries_4_losses(self):
        bug = self.record("expert_parallel")
        self.assertFactor(bug["expert"], 2.0)  # DeepSpeed #6546: edp size 2, not the world's 4
        self.assertFactor(bug["router"], 1.0)
        fix = self.record("expert_parallel-fix")
        self.assertFactor(fix["expert"], 1.0)
        self.assertFactor(fix["router"], 1.0)

    def test_tied_norm_counts_the_shared_weights_twice(self):
        bug = self.record("tied_norm")
        self.assertAlmostEqual(bug["counted"], 2.0, delta=ROUNDING)
        self.assertGreater(bug["norm_ratio"], 1.2)
        self.assertEqual(bug["norm_spread"], 0.0)
        # Both norms stay under the clip threshold (1.0) at this scale: the steps are right.
        self.assertLess(bug["norm"], 1.0)
        self.assertFactor(bug["stepped"], 1.0)
        fix = self.record("tied_norm-fix")
        self.assertAlmostEqual(fix["counted"], 1.0, delta=ROUNDING)
        self.assertAlmostEqual(fix["norm_ratio"], 1.0, delta=ROUNDING)

    def test_tp_norm_counts_the_layernorm_once_per_rank_and_clips_too_hard(self):
        bug = self.record("tp_norm")
        self.assertEqual(bug["x_spread"], 0.0)  # one batch for the tensor-parallel ranks
        self.assertAlmostEqual(bug["counted"], 2.0, delta=ROUNDING)
        self.assertGreater(bug["norm_ratio"], 1.01)
        self.assertFactor(bug["stepped"], bug["reference_norm"] / bug["norm"])  # clipped by 0.95
        fix = self.record("tp_norm-fix")
        self.assertAlmostEqual(fix["counted"], 1.0, delta=ROUNDING)
        self.assertAlmostEqual(fix["norm_ratio"], 1.0, delta=ROUNDING)
        self.assertFactor(fix["stepped"], 1.0)

    @unittest.skipUnless(HAVE_DTENSOR, "dtensor_tp.py needs torch 2's DTensor")
    def test_dtensor_tp_counts_the_layernorm_once_per_rank(self):
        bug = self.record("dtensor_tp")
        self.assertAlmostEqual(bug["counted"], 2.0, delta=ROUNDING)
        fix = self.record("dtensor_tp-fix")
        self.assertAlmostEqual(fix["counted"], 1.0, delta=ROUNDING)
        self.assertFactor(fix["stepped"], 1.0)

    def test_an_example_run_through_its_own_script_writes_the_same_record(self):
        self.assertEqual(self.codes["entry"], [0, 0], self.logs.get("entry.rank-0"))
        with open(os.path.join(self.out, "entry.json")) as f:
            self.assertEqual(json.load(f), self.record(ENTRY))

    # Races on CPU: the values the race left, over several runs.

    def test_gloo_inplace_race_ends_steps_with_other_values_and_its_fix_never(self):
        changed = 0
        for run in range(RACE_RUNS):
            bug = self.record("gloo_inplace_race-%d" % run)
            self.assertEqual(bug["elements"], 1 << 16)
            changed += sum(n > 0 for step in bug["after_wait_vs_clipped_sum"] for n in step)
            fix = self.record("gloo_inplace_race-fix-%d" % run)
            for step in fix["after_wait_vs_sum"]:
                self.assertEqual(step, [0, 0])  # the reduction ran alone, then the clip
        self.assertGreater(changed, 0)  # of RACE_RUNS * 2 steps * 2 ranks

    def ring(self, job):
        """Per rank: what it received, what it should have, how many early reads were stale."""
        found = []
        for text, code in self.printed(job):
            m = re.search(r"received (\[.*?\]), expected (\[.*?\]); read before its wait and stale: (\d+)", text)
            self.assertIsNotNone(m, text)
            self.assertEqual(code, "0")
            found.append((m.group(1), m.group(2), int(m.group(3))))
        return found

    def test_p2p_ring_reads_an_irecvs_tensor_before_it_is_written_and_the_fix_never(self):
        stale = sum(s for run in range(RACE_RUNS) for _, _, s in self.ring("p2p_ring-read-early-%d" % run))
        self.assertGreater(stale, 0)  # of RACE_RUNS * 2 steps * 2 ranks
        for run in range(RACE_RUNS):
            for got, want, s in self.ring("p2p_ring-read-early-fix-%d" % run):
                self.assertEqual((got, s), (want, 0))

    def test_p2p_ring_sends_a_refill_made_before_the_isends_wait_and_the_fix_never(self):
        wrong = sum(got != want for run in range(RACE_RUNS)
                    for got, want, _ in self.ring("p2p_ring-write-early-%d" % run))
        self.assertGreater(wrong, 0)
        for run in range(RACE_RUNS):
            for got, want, _ in self.ring("p2p_ring-write-early-fix-%d" % run):
                self.assertEqual(got, want)

    # Never-written bytes.

    def test_uninit_accumulator_takes_old_bytes_into_the_update_and_the_fix_does_not(self):
        bug, fix = self.record("uninit_accumulator"), self.record("uninit_accumulator-fix")
        self.assertTrue(bug["reduced_agree"] and fix["reduced_agree"])
        self.assertEqual(fix["garbage_nonzero_by_step"], [])  # torch.zeros: no torch.empty
        garbage = bug["garbage_nonzero_by_step"]
        self.assertEqual(len(garbage), len(bug["reduced_by_step"]))
        self.assertGreater(max(garbage), 0, "torch.empty handed over only zeros in every step")
        first = next(k for k, n in enumerate(garbage) if n > 0)
        # Until torch.empty hands over old bytes the run is the fix's, bit for bit; from then on
        # what the update subtracts is not.
        self.assertEqual(bug["reduced_by_step"][:first], fix["reduced_by_step"][:first])
        self.assertNotEqual(bug["reduced_by_step"][first:], fix["reduced_by_step"][first:])

    # Order bugs, a dtype mismatch, deadlocks.

    def values(self, job, pattern):
        found = []
        for text, code in self.printed(job):
            m = re.search(pattern, text)
            self.assertIsNotNone(m, text)
            self.assertEqual(code, "0")
            found.append(m.groups())
        return found

    def test_collective_order_bug_adds_each_ranks_first_gradient_to_the_others_second(self):
        pattern = r"weight_grad (\S+), bias_grad (\S+)"
        sums = ("3", "21")  # 1 + 2 and 10 + 11
        for got in self.values("collective_order_bug", pattern):
            self.assertEqual(got, ("12", "12"))  # 1 + 11, 10 + 2
        for got in self.values("collective_order_bug-fix", pattern):
            self.assertEqual(got, sums)

    def assertHung(self, name, script, text, call):
        """Both ranks still waited in `call` at the line where `text` begins when the watchdog
        printed where they were, WATCHDOG_S after their group was made, and neither ended
        before the test killed it."""
        self.assertEqual(self.codes[name], [-9, -9], self.everything())
        where = '%s", line %d in ' % (script, line_of(script, text))
        for r in range(2):
            log = self.logs["%s.rank-%d" % (name, r)]
            self.assertIn("Timeout (0:00:%02d)!" % WATCHDOG_S, log)
            main = log[log.index("most recent call first"):]
            self.assertTrue(main.split("\n")[1].endswith(" in " + call), log)  # the innermost frame
            self.assertIn(where, main, log)

    def test_cross_group_deadlock_waits_in_its_first_all_reduce_until_ended_and_the_fix_sums(self):
        self.assertHung("hang-cross_group_deadlock", example("cross_group_deadlock"),
                        "dist.all_reduce(t, group=g)", "all_reduce")
        for got in self.values("cross_group_deadlock-fix", r"grads (\S+), stats (\S+)"):
            self.assertEqual(got, ("1", "1"))  # 0 + 1 over the pair

    def test_fixture_p2p_deadlock_waits_in_its_first_send_and_the_batch_exchanges(self):
        self.assertHung("hang-p2p-deadlock", FIXTURE_PROGRAMS, "dist.send(act, peer)", "send")
        for got, sent in self.values("p2p-batch", r"received (\[.*?\]), its peer sent (\[.*?\])"):
            self.assertEqual(got, sent)

    def test_fixture_mismatch_dtype_garbles_the_sum_and_one_dtype_sums_it(self):
        pattern = r"values (\[.*?\]), the sum meant (\S+)"
        wrong = [(got, meant) for got, meant in self.values("mismatch-dtype", pattern)
                 if got != "[%s]" % meant]
        self.assertEqual(len(wrong), 2, wrong)  # no error, and neither rank holds the sum
        for got, meant in self.values("mismatch-dtype-fix", pattern):
            self.assertEqual(got, "[%s]" % meant)


class DocumentedTest(unittest.TestCase):
    """Every example says how its verdict was established, and so does every fixture folder."""

    @staticmethod
    def rows(readme):
        """The names in the first cell of each row of `readme`'s tables, with the row."""
        found = {}
        with open(readme, encoding="utf-8") as f:
            for line in f:
                if line.startswith("| `"):
                    for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                        found[name] = line
        return found

    def test_every_example_has_a_ground_truth_paragraph_and_a_row(self):
        rows = self.rows(os.path.join(EXAMPLES, "README.md"))
        names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(EXAMPLES, "[!_]*.py")))
        self.assertGreaterEqual(len(names), 20)
        for name in names:
            with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
                doc = f.read().split('"""')[1]
            self.assertIn("Ground truth", doc, name)
            self.assertIn(name, rows)

    def test_every_fixture_folder_has_a_row(self):
        rows = self.rows(os.path.join(FIXTURES, "README.md"))
        folders = [n for n in sorted(os.listdir(FIXTURES)) if os.path.isdir(os.path.join(FIXTURES, n))]
        self.assertGreaterEqual(len(folders), 40)
        self.assertEqual(sorted(rows), folders)  # every folder, and no row for one that is gone


if __name__ == "__main__":
    unittest.main()
