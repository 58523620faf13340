"""One rank of the examples' ground-truth run (test_example_truth.py), uncaptured.

Jobs: in one process group, each job runs a program as its own script runs (runpy, its flags in
sys.argv, `__name__ == "__main__"`), with _launch.init() handing it the group already made and
_launch.finish() keeping it for the next job; its output goes to OUT/JOB.rank-R.out, its exit
status to OUT/JOB.rank-R.code and, with --check-truth, rank 0 writes its record to OUT/JOB.json
(examples/pytorch/_ground_truth.py). Starting the ranks once for many programs keeps the test
within its time on two cores.

    RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... python3 _example_truth_ranks.py OUT JOBS.json

Watchdog: one rank of a program that should hang. SECONDS after its group is made (its
_launch.init() returned, so start-up time does not count), faulthandler prints where every thread
of it is; the rank goes on waiting, and the caller ends it once every rank has printed (a rank
that ended by itself would close its connections and wake its peers with an error).

    RANK=r ... python3 _example_truth_ranks.py --watchdog SECONDS SCRIPT ARGS...
"""

import contextlib
import faulthandler
import json
import os
import runpy
import sys
from typing import Any, Dict, List

import torch  # noqa: F401  (imported before any clock starts)
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "pytorch")


def run_job(out: str, job: Dict[str, Any], rank: int, world: int) -> None:
    import _ground_truth
    import _launch
    argv = [job["script"]] + job["args"]
    if job.get("truth"):
        argv += ["--check-truth", os.path.join(out, job["name"] + ".json")]
    watched: List[Any] = []

    def init():
        watched.append(_ground_truth.watch(argv))
        return rank, world

    def finish():
        if watched and watched[0] is not None:
            watched[0].record()
        dist.barrier()

    _launch.init, _launch.finish = init, finish
    sys.argv = list(argv)
    code: Any = 0
    prefix = os.path.join(out, "%s.rank-%d" % (job["name"], rank))
    with open(prefix + ".out", "w") as f, contextlib.redirect_stdout(f):
        try:
            runpy.run_path(job["script"], run_name="__main__")
        except SystemExit as e:
            code = e.code or 0
        finally:
            if watched and watched[0] is not None:
                watched[0].seen.stop()
    with open(prefix + ".code", "w") as f:
        f.write("%s\n" % code)


def jobs(out: str, path: str) -> None:
    sys.path.insert(0, EXAMPLES)
    import _launch
    rank, world = _launch.init()
    init, finish = _launch.init, _launch.finish
    with open(path) as f:
        todo = json.load(f)
    for job in todo:
        run_job(out, job, rank, world)
        dist.barrier()
    _launch.init, _launch.finish = init, finish
    finish()


def watchdog(seconds: float, script: str, args: List[str]) -> None:
    sys.path.insert(0, EXAMPLES)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import _launch
    init = _launch.init

    def started():
        out = init()
        faulthandler.dump_traceback_later(seconds)
        return out

    _launch.init = started
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--watchdog":
        watchdog(float(sys.argv[2]), sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 3:
        jobs(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: _example_truth_ranks.py OUT JOBS.json | --watchdog SECONDS SCRIPT ARGS...")
