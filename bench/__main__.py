"""`python -m bench [name ...]`: run the benchmarks (all by default) against the local stack. Run without names, it
also writes the cost model's result from them (``cost``) and rewrites the README's performance section
(``bench.report``)."""

from __future__ import annotations

import sys

from bench import archiver, compactor, erasure, fleet, maintainer, report
from kafkalake_dev.local.endpoints import local_credentials

BENCHMARKS = {
    "maintainer": maintainer.main,
    "archiver": archiver.main,
    "archiver-fleet": fleet.main,
    "compactor": compactor.main,
    "compactor-fleet": compactor.fleet,
    "erasure": erasure.main,
    "fleet": fleet.full,
    "cost": report.write_cost,
}

if __name__ == "__main__":
    with local_credentials():  # the benchmarks' clients and their child processes talk to moto
        for name in sys.argv[1:] or list(BENCHMARKS):
            BENCHMARKS[name]()
    if len(sys.argv) == 1:
        report.rewrite()
