"""One rank of the ground-truth run: in one process group, each named reproducer of
examples/pytorch/values runs as its bug and as its fix, and rank 0 writes each record to
OUT/<program>[-fix].json. Starting the ranks once for all the programs of a world size keeps
the test within its time on two cores (each rank's torch import and group set-up is the cost).

    RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... python3 _ground_truth_ranks.py OUT prog...
"""

import importlib
import os
import sys

VALUES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "examples", "pytorch", "values")


def main(out: str, programs) -> None:
    sys.path.insert(0, VALUES)
    truth = importlib.import_module("_truth")
    truth.init()
    for name in programs:
        program = importlib.import_module(name)
        for fix in (False, True):
            path = os.path.join(out, name + ("-fix" if fix else "") + ".json")
            truth.write(path, program.run(truth.Options(fix=fix, truth=path)))
    truth.finish()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: _ground_truth_ranks.py OUT PROGRAM...")
    main(sys.argv[1], sys.argv[2:])
