"""bench/gpu/gpu_bench.py: the GPU tables render from a JSON file deterministically, and the
READMEs hold no GPU figure that the committed JSON does not make.

sample-gpu-bench.json is NOT A MEASUREMENT: made-up values in the shape `gpu_bench.py run`
writes, so the rendering can be checked on a machine without a GPU.
"""
import importlib.util
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAMPLE = os.path.join(HERE, "sample-gpu-bench.json")
EXPECTED = os.path.join(HERE, "sample-expected.md")

spec = importlib.util.spec_from_file_location("gpu_bench", os.path.join(ROOT, "bench", "gpu", "gpu_bench.py"))
gpu_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_bench)


def sample():
    with open(SAMPLE) as f:
        return json.load(f)


def all_blocks(doc):
    return "".join(f"<!-- gpu-bench:{n} -->\n{gpu_bench.render_block(n, doc)}<!-- /gpu-bench:{n} -->\n"
                   for n in gpu_bench.RENDERERS)


class RenderTest(unittest.TestCase):
    def test_the_sample_is_labelled_as_no_measurement(self):
        doc = sample()
        self.assertTrue(doc["sample"])
        self.assertIn("NOT A MEASUREMENT", doc["note"])
        # and every table rendered from it says so, so it cannot pass for one in a README
        for name in gpu_bench.RENDERERS:
            self.assertIn("SAMPLE DATA, NOT A MEASUREMENT", gpu_bench.render_block(name, doc), name)

    def test_sample_renders_the_expected_tables_every_time(self):
        first, second = all_blocks(sample()), all_blocks(sample())
        self.assertEqual(first, second)
        with open(EXPECTED) as f:
            self.assertEqual(first, f.read(), "tests/gpu_bench/sample-expected.md is what the sample renders "
                                              "to: regenerate it only for an intended change of the tables")

    def test_headline_figures_are_median_min_max_of_the_runs(self):
        text = gpu_bench.render_block("summary", sample())
        self.assertIn("30.00 [29.70, 30.40]", text)  # our step: runs 30.0, 30.4, 29.7
        self.assertIn("8.90 [8.80, 9.10]", text)  # torch.compile, one batch
        self.assertIn("3.37×", text)  # 30.0 / 8.9
        self.assertIn("×3", text)  # the command, and that it ran three times

    def test_render_replaces_stale_block_content_and_nothing_else(self):
        text = "before\n<!-- gpu-bench:one-gpu -->\n| stale | 97.5 ms/step |\n<!-- /gpu-bench:one-gpu -->\nafter\n"
        out = gpu_bench.render_text(text, sample())
        self.assertNotIn("97.5", out)
        self.assertTrue(out.startswith("before\n<!-- gpu-bench:one-gpu -->\n"))
        self.assertTrue(out.endswith("<!-- /gpu-bench:one-gpu -->\nafter\n"))
        self.assertEqual(gpu_bench.render_text(out, sample()), out)

    def test_without_a_json_each_block_says_nothing_was_measured(self):
        self.assertIn("Not measured yet", gpu_bench.render_block("summary", None))

    def test_a_figure_outside_the_blocks_is_found(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "README.md")
            with open(path, "w") as f:
                f.write("<!-- gpu-bench:summary -->\n<!-- /gpu-bench:summary -->\n"
                        "TinyLM runs at 97.5 ms/step on an H200.\n")
            self.assertEqual(len(gpu_bench.stale_lines(path, tables_too=False)), 1)


class RepositoryTest(unittest.TestCase):
    def test_readmes_hold_exactly_what_the_committed_json_renders(self):
        class A:
            json = None
            files = []
        self.assertEqual(gpu_bench.cmd_check(A()), 0,
                         "run `bench/gpu/gpu_bench.py render --write` (or measure: `make gpu-bench`)")


if __name__ == "__main__":
    sys.exit(unittest.main())
