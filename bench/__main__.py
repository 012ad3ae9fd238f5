"""`python -m bench [name ...]`: run the benchmarks (all by default) against the local stack."""

from __future__ import annotations

import sys

from bench import archiver, compactor, maintainer

BENCHMARKS = {
    "maintainer": maintainer.main,
    "archiver": archiver.main,
    "compactor": compactor.main,
    "compactor-fleet": compactor.fleet,
}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(BENCHMARKS):
        BENCHMARKS[name]()
