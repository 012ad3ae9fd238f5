"""`python -m bench [name ...]`: run the benchmarks (all by default, the cost model's result from them last) against
the local stack. Each writes a result file to bench/results and changes nothing else: the docs and the stacks' worker
sizes follow the results only once someone adopts them (``python -m bench.report --adopt``, see docs/benchmarks.md)."""

from __future__ import annotations

import sys

from bench import (
    archiver,
    compactor,
    erasure,
    fleet,
    fleet_scale,
    hashing,
    iceberg,
    maintainer,
    peer,
    peer_freshness,
    protobuf,
    report,
    uploads,
    upsert,
)
from kafkalake_dev.local.endpoints import local_credentials

BENCHMARKS = {
    "maintainer": maintainer.main,
    "archiver": archiver.main,
    "archiver-protobuf": protobuf.main,
    "archiver-fleet": fleet.main,
    "compactor": compactor.main,
    "compactor-fleet": compactor.fleet,
    "erasure": erasure.main,
    "hashing": hashing.main,
    "uploads": uploads.main,
    "iceberg": iceberg.main,
    "peer": peer.main,
    "upsert": upsert.main,
    "peer-freshness": peer_freshness.main,
    "fleet": fleet_scale.full,
    "cost": report.write_cost,
}

if __name__ == "__main__":
    with local_credentials():  # the benchmarks' clients and their child processes talk to moto
        for name in sys.argv[1:] or list(BENCHMARKS):
            BENCHMARKS[name]()
    print("[bench] to show these results in docs/benchmarks.md: python -m bench.report --adopt [name ...]")
