"""Runs bench/scaling/cpu_scaling.sh on 24 schedules (threads only) and checks what it writes:
a row per configuration with the start and the speedup past it that follow from the seconds.
No timing is asserted: under a loaded test run a configuration's start (one schedule per
worker) can take as long as the whole run, and then the script writes 0 past the start.
  python3 cpu_scaling_check.py SHARDCHECK_BINARY SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile


def main(binary, source):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, RUNS="24", WORKERS="1 2", REPEAT="3")
        # No mpirun (a path that is not a program): the processes are skipped, as without one.
        subprocess.run(["sh", os.path.join(source, "bench", "scaling", "cpu_scaling.sh"), binary, "no-mpirun", out],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "cpu_scaling.json")) as f:
            doc = json.load(f)
        with open(os.path.join(out, "cpu_scaling.md")) as f:
            md = f.read()
    assert doc["repeat"] == 3, doc
    rows = doc["results"]
    assert [(r["mode"], r["workers"]) for r in rows] == [("threads", 1), ("threads", 2)], rows
    base = rows[0]
    for r in rows:
        assert r["seconds"] > 0 and r["start_seconds"] > 0, r
        assert abs(r["speedup"] - base["seconds"] / r["seconds"]) < 0.011, r
        if r["seconds"] <= r["start_seconds"]:  # nothing left past the start: no figure
            assert r["speedup_past_start"] == 0 and r["efficiency_past_start"] == 0, r
            continue
        past = (base["seconds"] - base["start_seconds"]) / (r["seconds"] - r["start_seconds"])
        assert abs(r["speedup_past_start"] - past) < 0.011, (r, past)
        assert abs(r["efficiency_past_start"] - past / r["workers"]) < 0.011, r
    assert "| threads | 2 |" in md and "speedup past start" in md and "the median of 3" in md, md
    print("cpu_scaling.sh: 2 rows, start and speedup past it consistent")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
