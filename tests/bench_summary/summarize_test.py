"""bench/summarize.py: the pages' benchmark blocks are what the committed bench/results/ renders,
a figure changed by hand fails the check, and the verdicts follow the figures.

The synthetic Google Benchmark files written here are NOT MEASUREMENTS: they hold made-up values
in the shape the benchmark programs write, to exercise the rendering.
"""
import importlib.util
import json
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

spec = importlib.util.spec_from_file_location("summarize", os.path.join(ROOT, "bench", "summarize.py"))
summarize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize)


def bench_json(path, runs):
    with open(path, "w") as f:
        json.dump({"context": {}, "benchmarks": runs}, f)


def sim_run(name, ops_per_s):
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": 1, "iterations": 1,
            "real_time": 10.0, "cpu_time": 10.0, "time_unit": "ms", "ops_per_s": ops_per_s}


class SummarizeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_the_committed_pages_are_what_the_committed_results_render(self):
        self.assertEqual(summarize.main(["check"]), 0,
                         "run `python3 bench/summarize.py render --write` after `make bench`, and commit bench/results/")

    def test_every_page_has_its_blocks(self):
        with open(os.path.join(ROOT, "bench", "README.md")) as f:
            names = {m[0] for m in summarize.BLOCK.findall(f.read())}
        self.assertEqual(names, {"results", "targets", "scaling", "scaling-16"})
        with open(os.path.join(ROOT, "docs", "limits.md")) as f:
            self.assertEqual({m[0] for m in summarize.BLOCK.findall(f.read())}, {"scale"})

    def test_a_figure_changed_by_hand_fails_the_check(self):
        page = os.path.join(self.tmp, "README.md")
        with open(os.path.join(ROOT, "bench", "README.md")) as f:
            text = f.read()
        start = text.index("<!-- bench:results -->")
        end = text.index("<!-- /bench:results -->")
        block = text[start:end]
        changed = block + "  simulator ops/s, typed by hand                             9.99 M/s\n"
        with open(page, "w") as f:
            f.write(text[:start] + changed + text[end:])
        self.assertEqual(summarize.main(["check", page]), 1)
        summarize.main(["render", "--write", page])
        self.assertEqual(summarize.main(["check", page]), 0)

    def test_missing_results_say_so_instead_of_figures(self):
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        res = summarize.Results(empty)
        for name in ("results", "targets", "scaling", "scale"):
            self.assertIn("Not in these results", summarize.render_block(name, res), name)

    def test_verdicts_follow_the_figures(self):
        results = os.path.join(self.tmp, "r")
        os.mkdir(results)
        runs = [sim_run(f"BM_SimOps_Detectors{d}/{r}", 2e6) for d in ("On", "Off") for r in (2, 8)]
        runs += [sim_run("BM_SimOps_DetectorsOn/64", 4e5), sim_run("BM_SimOps_DetectorsOff/64", 5e5),
                 sim_run("BM_SimOps_DetectorsOn_FixedModel/64", 1.2e6)]
        bench_json(os.path.join(results, "sim_bench.json"), runs)
        with open(os.path.join(results, "machine.txt"), "w") as f:
            f.write("date:    2026-01-01 00:00 UTC\nmachine: 2 cores, a made-up CPU\ncommit:  0123456789ab\n")
        res = summarize.Results(results)
        table = summarize.summary(res)
        self.assertRegex(table, r"detectors on, 64 ranks\s+400 k/s\s+>= 1 M/s\s+MISSED")
        self.assertRegex(table, r"detectors on, fixed model, 64 ranks\s+1.20 M/s\s+>= 1 M/s\s+met")
        targets = summarize.render_block("targets", res)
        self.assertIn("400 k/s at 64 (MISSED at 64)", targets)
        self.assertIn("1.20 M/s at 64 ranks (met)", targets)
        self.assertIn("2026-01-01 00:00 UTC", targets)
        self.assertIn("commit 0123456789ab", targets)

    def test_passes_merge_into_one_median_per_benchmark(self):
        def run(name, ms, ops):
            return dict(sim_run(name, ops), real_time=ms, cpu_time=ms)
        passes = [{"context": {"host_name": "made-up"}, "benchmarks": [run("BM_A/2/real_time", 3.0, 1e6),
                                                                        run("BM_Once/real_time", 9.0, 5.0)]},
                  {"context": {}, "benchmarks": [run("BM_A/2/real_time", 1.0, 3e6)]},
                  {"context": {}, "benchmarks": [run("BM_A/2/real_time", 2.0, 2e6)]}]
        paths = []
        for i, doc in enumerate(passes):
            paths.append(os.path.join(self.tmp, f"pass-{i}.json"))
            bench_json(paths[-1], doc["benchmarks"])
        merged = os.path.join(self.tmp, "sim_bench.json")
        self.assertEqual(summarize.main(["merge", merged] + paths), 0)
        chosen = summarize.load(self.tmp, "sim_bench")
        self.assertEqual(chosen["BM_A/2"]["aggregate_name"], "median")
        self.assertEqual(chosen["BM_A/2"]["real_time"], 2.0)
        self.assertEqual(chosen["BM_A/2"]["ops_per_s"], 2e6)
        self.assertEqual(chosen["BM_Once"]["real_time"], 9.0)  # run in one pass: that run
        with open(merged) as f:
            runs = json.load(f)["benchmarks"]
        self.assertEqual([r["repetition_index"] for r in runs if r["run_type"] == "iteration"
                          and r["run_name"] == "BM_A/2/real_time"], [0, 1, 2])


if __name__ == "__main__":
    unittest.main()
