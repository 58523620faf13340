"""Capture on a GPU: runs where torch has CUDA, skipped elsewhere."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(os.path.dirname(PYROOT), "examples", "pytorch")

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    HAVE_CUDA = False


def read(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@unittest.skipUnless(HAVE_CUDA, "needs torch with CUDA")
class GradReuseRaceTest(unittest.TestCase):
    def capture(self, *args):
        d = tempfile.mkdtemp()
        p = subprocess.run([sys.executable, "-m", "shardcheck.capture", "--out", d, "--",
                            "grad_reuse_race.py"] + list(args), cwd=EXAMPLES,
                           env=dict(os.environ, PYTHONPATH=PYROOT), capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return read(os.path.join(d, "rank-0.jsonl"))

    def test_the_race_is_in_the_capture_with_its_lines(self):
        lines = self.capture()
        sites = {r["id"]: r["line"] for r in lines if r.get("k") == "site"}
        streams = {r["id"]: r["name"] for r in lines if r.get("k") == "stream"}
        first = {}
        for i, r in enumerate(lines):
            key = (r.get("k"), sites.get(r.get("at")))
            first.setdefault(key, (i, r))
        i_read, side_read = first[("op", 32)]  # scaled = grad * (1.0 / world)
        i_free, free = first[("free", 36)]  # del grad
        i_alloc, alloc = first[("alloc", 37)]  # act = torch.empty(...)
        self.assertLess(i_read, i_free)
        self.assertLess(i_free, i_alloc)
        self.assertEqual(free["buf"], side_read["r"][0][0])
        self.assertNotEqual(side_read["stream"], 0)
        self.assertEqual(alloc["stream"], 0)
        self.assertEqual(streams[0], "default")
        coll = [r for r in lines if r.get("k") == "coll"]
        self.assertEqual([c["op"] for c in coll], ["reduce_scatter", "reduce_scatter"])
        self.assertEqual(lines[-1]["k"], "end")

    def test_the_fix_records_the_stream(self):
        lines = self.capture("--fix")
        sites = {r["id"]: r["line"] for r in lines if r.get("k") == "site"}
        rs = [r for r in lines if r.get("k") == "record_stream"]
        self.assertEqual(len(rs), 2)
        self.assertEqual({sites[r["at"]] for r in rs}, {35})
        self.assertNotEqual(rs[0]["stream"], 0)


if __name__ == "__main__":
    unittest.main()
