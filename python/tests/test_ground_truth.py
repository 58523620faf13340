"""Ground truth of the value reproducers of examples/pytorch/values, established without
shardcheck: every program runs uncaptured as its bug and as its fix on CPU over gloo, measures
itself against a single-process reference of the global loss, or compares its replicas across the
ranks (see the programs' docstrings and _truth.py), and this test asserts what each measured: the
bug shows its stated factor or divergence, the fix matches the reference to rounding.

All the 2-rank programs share one set of 2 rank processes and the 4-rank ones another, run side by
side (python/tests/_ground_truth_ranks.py); one program also runs through its own script."""

import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
VALUES = os.path.join(REPO, "examples", "pytorch", "values")

try:
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:
    if os.environ.get("SHARDCHECK_REQUIRE_TORCH"):
        raise
    HAVE_GLOO = False

ROUNDING = 1e-4  # float32 programs against a float64 reference
SCRIPT = "megatron7227_tied_pp_norm"  # also run through its own entry point


def programs():
    """Each reproducer's name and its number of ranks (its RANKS line)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(VALUES, "[!_]*.py"))):
        with open(path) as f:
            ranks = [int(line.split("=")[1]) for line in f if line.startswith("RANKS = ")]
        found[os.path.basename(path)[:-3]] = ranks[0] if ranks else None
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(world, argv, log):
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return [subprocess.Popen([sys.executable] + argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(world)]


@unittest.skipUnless(HAVE_GLOO, "torch with gloo is not installed")
class GroundTruthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        out = cls.tmp.name
        by_world = {}
        for name, world in programs().items():
            by_world.setdefault(world, []).append(name)
        driver = os.path.join(HERE, "_ground_truth_ranks.py")
        log = open(os.path.join(out, "ranks.log"), "w")
        procs = []
        for world, names in sorted(by_world.items(), key=lambda kv: str(kv[0])):
            if world in (2, 4):
                procs += start(world, [driver, out] + names, log)
        script = os.path.join(VALUES, SCRIPT + ".py")
        procs += start(2, [script, "--check-truth", os.path.join(out, "script.json")], log)
        try:
            codes = [p.wait(timeout=300) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            log.close()
        with open(os.path.join(out, "ranks.log")) as f:
            cls.log = f.read()
        cls.codes = codes
        cls.records = {}
        for path in glob.glob(os.path.join(out, "*.json")):
            with open(path) as f:
                cls.records[os.path.basename(path)[:-5]] = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def record(self, name, fix):
        self.assertEqual(self.codes, [0] * len(self.codes), self.log[-4000:])
        key = name + ("-fix" if fix else "")
        self.assertIn(key, self.records, self.log[-4000:])
        rec = self.records[key]
        self.assertEqual((rec["program"], rec["fix"]), (name, fix))
        return rec

    def assertFactor(self, summary, factor):
        """Every compared gradient is `factor` times its reference, up to rounding."""
        self.assertAlmostEqual(summary["factor_min"], factor, delta=ROUNDING, msg=summary)
        self.assertAlmostEqual(summary["factor_max"], factor, delta=ROUNDING, msg=summary)
        self.assertLess(summary["residual_max"], ROUNDING, summary)

    def assertNotScaled(self, summary):
        """Some compared gradient is no multiple of its reference (a partial sum, a mix)."""
        self.assertGreater(summary["residual_max"], 0.1, summary)

    def assertBothMatch(self, name, *groups):
        for group in groups:
            self.assertFactor(self.record(name, True)[group], 1.0)

    # Every reproducer is here.

    def test_every_reproducer_declares_2_or_4_ranks_and_its_records_were_written(self):
        found = programs()
        self.assertGreaterEqual(len(found), 16)
        for name, world in found.items():
            self.assertIn(world, (2, 4), name)
            self.record(name, False)
            self.record(name, True)
            self.assertTrue(hasattr(self, "test_" + name), "no ground-truth assertions for " + name)

    def test_a_script_run_on_its_own_writes_the_same_record(self):
        self.record(SCRIPT, False)
        self.assertEqual(self.records["script"], self.records[SCRIPT])

    # divisor_mismatch

    def test_ds6546_expert_edp_divisor(self):
        bug = self.record("ds6546_expert_edp_divisor", False)
        self.assertFactor(bug["expert"], 2.0)  # divided by the expert-data-parallel size, 2, not 4
        self.assertFactor(bug["dense"], 1.0)
        self.assertBothMatch("ds6546_expert_edp_divisor", "expert", "dense")

    def test_megablocks20_expert_grad_scale(self):
        bug = self.record("megablocks20_expert_grad_scale", False)
        self.assertFactor(bug["expert"], 2.0)  # not scaled by 1 / expert-parallel size
        self.assertFactor(bug["dense"], 1.0)
        self.assertBothMatch("megablocks20_expert_grad_scale", "expert", "dense")

    def test_torchtitan1551_expert_fsdp_divide(self):
        bug = self.record("torchtitan1551_expert_fsdp_divide", False)
        self.assertFactor(bug["expert"], 2.0)  # averaged over dp_shard_mod_ep, 2, not dp_shard, 4
        self.assertFactor(bug["dense"], 1.0)
        self.assertBothMatch("torchtitan1551_expert_fsdp_divide", "expert", "dense")

    def test_torchtune2172_token_scale(self):
        self.assertFactor(self.record("torchtune2172_token_scale", False)["all"], 0.5)  # 1 / world
        self.assertBothMatch("torchtune2172_token_scale", "all")

    # double_reduction

    def test_makani103_shared_mp_sum(self):
        bug = self.record("makani103_shared_mp_sum", False)
        self.assertFactor(bug["replicated"], 2.0)  # whole on each rank, then summed over 2
        self.assertFactor(bug["split"], 1.0)
        self.assertBothMatch("makani103_shared_mp_sum", "replicated", "split")

    def test_areno496_mla_double_reduce(self):
        bug = self.record("areno496_mla_double_reduce", False)
        self.assertFactor(bug["q_a_and_norms"], 2.0)
        self.assertFactor(bug["kv_a_compressed"], 2.0)  # reduced through kv_b and again
        self.assertFactor(bug["kv_a_rope"], 1.0)  # rank-local, reduced once
        self.assertNotScaled(bug["kv_a"])  # so kv_a's gradient changes direction
        self.assertFactor(bug["split"], 1.0)
        self.assertBothMatch("areno496_mla_double_reduce", "q_a_and_norms", "kv_a", "split")

    def test_fastmoe169_expert_norm_twice(self):
        bug = self.record("fastmoe169_expert_norm_twice", False)
        self.assertAlmostEqual(bug["experts_counted"], 2.0, delta=ROUNDING)
        self.assertGreater(bug["norm_ratio"], 1.05)
        fix = self.record("fastmoe169_expert_norm_twice", True)
        self.assertAlmostEqual(fix["experts_counted"], 1.0, delta=ROUNDING)
        self.assertAlmostEqual(fix["norm_ratio"], 1.0, delta=ROUNDING)

    # missing_reduction

    def test_megatron1446_sp_final_layernorm(self):
        bug = self.record("megatron1446_sp_final_layernorm", False)
        self.assertNotScaled(bug["final_layernorm"])  # each rank's half of the sequence
        self.assertFactor(bug["input_layernorm"], 1.0)
        self.assertFactor(bug["split"], 1.0)
        self.assertGreater(bug["replica_spread"]["final_layernorm.weight"], 1e-3)
        self.assertEqual(bug["replica_spread"]["input_layernorm.weight"], 0.0)
        self.assertBothMatch("megatron1446_sp_final_layernorm", "final_layernorm", "input_layernorm", "split")
        self.assertEqual(set(self.record("megatron1446_sp_final_layernorm", True)["replica_spread"].values()),
                         {0.0})

    def test_bigcode12_mqa_kv_bias(self):
        bug = self.record("bigcode12_mqa_kv_bias", False)
        self.assertNotScaled(bug["key_value.bias"])  # each rank's heads' share
        self.assertFactor(bug["key_value.weight"], 1.0)
        self.assertGreater(bug["replica_spread"]["0.key_value.bias"], 1e-3)
        self.assertEqual(bug["replica_spread"]["0.key_value.weight"], 0.0)
        self.assertBothMatch("bigcode12_mqa_kv_bias", "key_value.bias", "key_value.weight")
        self.assertEqual(set(self.record("bigcode12_mqa_kv_bias", True)["replica_spread"].values()), {0.0})

    def test_rae40_unwrapped_forward(self):
        bug = self.record("rae40_unwrapped_forward", False)
        self.assertNotScaled(bug["decoder"])  # each rank's own gradient
        self.assertGreater(max(bug["replica_spread"].values()), 1e-3)
        self.assertBothMatch("rae40_unwrapped_forward", "decoder")
        self.assertEqual(set(self.record("rae40_unwrapped_forward", True)["replica_spread"].values()), {0.0})

    def test_nemorl3716_split_api_qk_norm(self):
        bug = self.record("nemorl3716_split_api_qk_norm", False)
        self.assertNotScaled(bug["qk_layernorm"])  # each rank's heads' share
        self.assertFactor(bug["split"], 1.0)
        self.assertGreater(bug["replica_spread"]["q_layernorm.weight"], 1e-3)
        self.assertBothMatch("nemorl3716_split_api_qk_norm", "qk_layernorm", "split")
        self.assertEqual(set(self.record("nemorl3716_split_api_qk_norm", True)["replica_spread"].values()),
                         {0.0})

    # replica_divergence

    def test_nanochat857_lr_progress(self):
        bug = self.record("nanochat857_lr_progress", False)
        self.assertEqual(bug["grad_spread"], 0.0)  # the same gradients ...
        self.assertNotEqual(bug["lr_by_rank"][0], bug["lr_by_rank"][1])  # ... different rates
        self.assertGreater(bug["param_spread"], 1e-4)
        fix = self.record("nanochat857_lr_progress", True)
        self.assertEqual(fix["lr_by_rank"][0], fix["lr_by_rank"][1])
        self.assertEqual(fix["param_spread"], 0.0)

    def test_automodel3816_ep_clip(self):
        bug = self.record("automodel3816_ep_clip", False)
        self.assertGreater(abs(bug["norm_by_rank"][0] - bug["norm_by_rank"][1]), 1e-3)
        self.assertLess(max(bug["norm_ratio_by_rank"]), 0.95)  # each rank sees its own expert only
        self.assertGreater(bug["dense_param_spread"], 1e-4)  # the shared weights drift apart
        fix = self.record("automodel3816_ep_clip", True)
        self.assertEqual(fix["norm_by_rank"][0], fix["norm_by_rank"][1])
        for ratio in fix["norm_ratio_by_rank"]:
            self.assertAlmostEqual(ratio, 1.0, delta=ROUNDING)
        self.assertEqual(fix["dense_param_spread"], 0.0)

    def test_disruptcnn3_plateau_local_loss(self):
        bug = self.record("disruptcnn3_plateau_local_loss", False)
        self.assertNotEqual(bug["lr_by_rank"][0], bug["lr_by_rank"][1])
        self.assertGreater(bug["param_spread"], 1e-3)
        fix = self.record("disruptcnn3_plateau_local_loss", True)
        self.assertEqual(fix["lr_by_rank"][0], fix["lr_by_rank"][1])
        self.assertEqual(fix["param_spread"], 0.0)

    # grad_norm_miscount

    def test_megatron7227_tied_pp_norm(self):
        bug = self.record("megatron7227_tied_pp_norm", False)
        self.assertAlmostEqual(bug["tied_counted"], 2.0, delta=ROUNDING)
        self.assertEqual(bug["norm_spread"], 0.0)
        fix = self.record("megatron7227_tied_pp_norm", True)
        self.assertAlmostEqual(fix["norm_ratio"], 1.0, delta=ROUNDING)

    def test_nemorl3788_tp_replicated_norm(self):
        bug = self.record("nemorl3788_tp_replicated_norm", False)
        self.assertAlmostEqual(bug["replicated_counted"], 2.0, delta=ROUNDING)
        fix = self.record("nemorl3788_tp_replicated_norm", True)
        self.assertAlmostEqual(fix["replicated_counted"], 1.0, delta=ROUNDING)
        self.assertAlmostEqual(fix["norm_ratio"], 1.0, delta=ROUNDING)

    def test_deepspeed8475_expert_norm_average(self):
        bug = self.record("deepspeed8475_expert_norm_average", False)
        self.assertLess(bug["norm_ratio"], 0.9)  # the mean of per-rank norms undercounts experts
        self.assertAlmostEqual(self.record("deepspeed8475_expert_norm_average", True)["norm_ratio"], 1.0,
                               delta=ROUNDING)

    def test_veomni862_hsdp_norm(self):
        bug = self.record("veomni862_hsdp_norm", False)
        self.assertAlmostEqual(bug["norm_ratio"], 2 ** 0.5, delta=ROUNDING)  # each shard twice
        self.assertAlmostEqual(self.record("veomni862_hsdp_norm", True)["norm_ratio"], 1.0, delta=ROUNDING)

    # a control: a double average is no bug

    def test_kubeflow122_ddp_plus_average(self):
        bug = self.record("kubeflow122_ddp_plus_average", False)
        fix = self.record("kubeflow122_ddp_plus_average", True)
        self.assertFactor(bug["all"], 1.0)
        self.assertFactor(fix["all"], 1.0)
        self.assertEqual(bug["param_digest"], fix["param_digest"])
        self.assertEqual((bug["param_spread"], fix["param_spread"]), (0.0, 0.0))


if __name__ == "__main__":
    unittest.main()
