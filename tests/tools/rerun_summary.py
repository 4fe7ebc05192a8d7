#!/usr/bin/env python3
"""Summarise a second --all run of the guest kernels for tests/test_rerun.py.

usage: python3 tests/tools/rerun_summary.py FIRST SECOND > tests/data/rerun/summary.json

FIRST holds the reference sets (outputs/), SECOND a second run of the same kernels (e.g. the
DIR of `./run.sh --kernel all --all --out DIR`). For each guest kernel (a SECOND/<release>/
whose raw/p01-machine/vm.txt exists) that FIRST also has, the summary records the vm.txt facts
the test checks (kernel=, side_by_side=) and every matrix row that changed between the two runs
(tcplab_matrix.build of the pair): its two cell texts and whether it is an environment row.
That is all docs/kernel-diff.md's "Two runs of one kernel under TCG" needs, so the second run's
files need not be kept. Exit 2 with one line on stderr for bad usage or a missing directory."""
import json
import os
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _lib in ("report", "tools"):
    sys.path.insert(0, os.path.join(TOP, "experiments", _lib))
import tcplab_matrix as M  # noqa: E402

SCHEMA = 1


def vm_facts(path):
    """kernel= and side_by_side= of raw/p01-machine/vm.txt, or None when there is none."""
    try:
        with open(os.path.join(path, "raw", "p01-machine", "vm.txt")) as f:
            pairs = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None
    return {k: pairs.get(k) for k in ("kernel", "side_by_side")}


def summarise(first, second):
    kernels = {}
    for release in sorted(os.listdir(second)):
        vm = vm_facts(os.path.join(second, release))
        if vm is None or not os.path.isdir(os.path.join(first, release)):
            continue
        m = M.build([os.path.join(first, release), os.path.join(second, release)])
        kernels[release] = {
            "vm": vm,
            "changed": {r["key"]: {"texts": [c["text"] for c in r["cells"]],
                                   "environment": r["environment"]}
                        for r in m["rows"] if r["changed"]},
        }
    return {"schema": SCHEMA, "made_by": "tests/tools/rerun_summary.py", "kernels": kernels}


def main(argv):
    if len(argv) != 3 or not all(os.path.isdir(d) for d in argv[1:]):
        sys.stderr.write("usage: rerun_summary.py FIRST_DIR SECOND_DIR (two directories)\n")
        return 2
    json.dump(summarise(argv[1], argv[2]), sys.stdout, indent=1, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
