"""Verify, the third step: everything in each run directory, from footers and key columns only
(``spark_jobs.compaction.merging``), against the digest the write recorded. Each merge task inspects its output from
the local file it uploads with a checksum S3 checks, so a run's own writes need no Spark job here (measured: the job
of its own was 1.8-2.8 s of a 15-20 s compaction of 320 MiB); outputs an earlier run wrote (a manifest carried forward
in state ``written``) are read back from S3 by one Spark job of one task per output file
(``spark_jobs.compaction.merging.inspect``). Either way the listed size of every output is held to the inspected one.

The run directory must hold exactly the files written, each strictly ordered by key (no repeats), no two files
sharing a key, one schema, and the outputs' keys must be the expected ones (``Manifest.expected``: the inputs' keys
minus those the write dropped). A partition that fails is left as it was and its manifest rolls back to
``planned``: the next run writes the run directory again.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from kafkalake.aws import list_objects
from spark_jobs.compaction.digest import KeyDigest
from spark_jobs.compaction.manifest import Manifest, ManifestState
from spark_jobs.compaction.merging import InspectTask, inspect
from spark_jobs.compaction.work import Rewriter, Work, grouped

VERIFICATION_FAILED = "verification failed: the output does not hold exactly the inputs"


def verify(rewriter: Rewriter, items: list[Work]) -> None:
    """Items whose run directory holds exactly the expected keys move to ``verified`` (with their outputs' rows and
    key ranges); the others are failed and rolled back to ``planned``."""
    listed = {}
    for item in items:
        listed[item.key] = rewriter.isolated(
            item, "verify", lambda i: list_objects(rewriter.s3, rewriter.bucket, i.manifest.output_prefix)
        )
    tasks = [
        InspectTask(item.key, rewriter.endpoints, rewriter.bucket, key)
        for item in items
        if not item.failure and not item.inspections
        for key in sorted(listed[item.key] or {})
        if key.endswith(".parquet")
    ]
    started = time.monotonic()
    reports = grouped(rewriter.tasks(inspect, tasks, f"compactor: inspect {len(tasks)} files"))
    if tasks:
        rewriter.say(f"inspected {len(tasks)} files in {time.monotonic() - started:.1f} s")
    for item in items:
        if item.failure:
            continue
        mine = list(item.inspections.values()) or reports.get(item.key, [])
        problems = _problems(item.manifest, listed[item.key] or {}, mine)
        if problems:
            item.fail(f"{VERIFICATION_FAILED}: {'; '.join(problems)}")
            # the partition is left as it was; roll back: the next run writes the run directory again
            rewriter.isolated(item, "verify", lambda i: rewriter.advance(i, ManifestState.PLANNED))
            continue
        item.seconds["verify"] += sum(r["seconds"] for r in mine)
        item.manifest.outputs = dict(listed[item.key] or {})
        item.manifest.rows = sum(r["rows"] for r in mine)
        item.manifest.output_ranges = {r["key"]: r["ranges"] for r in sorted(mine, key=lambda r: r["key"])}
        rewriter.isolated(item, "verify", lambda i: rewriter.advance(i, ManifestState.VERIFIED))


def _problems(manifest: Manifest, listed: dict[str, int], reports: list[dict[str, Any]]) -> list[str]:
    """Why a run directory does not hold exactly the expected keys, one per line; none when it does."""
    problems = []
    unexpected = sorted(set(listed) - set(manifest.outputs))
    if unexpected:
        problems.append(f"files the write did not produce: {unexpected}")
    missing = sorted(set(manifest.outputs) - set(listed))
    if missing:
        problems.append(f"written files missing: {missing}")
    problems += [f"{r['key']} unreadable: {r['error']}" for r in reports if "error" in r]
    readable = [r for r in reports if "error" not in r]
    problems += [
        f"{r['key']}: {listed[r['key']]} bytes listed, {r['bytes']} read back"
        for r in readable
        if r["key"] in listed and listed[r["key"]] != r["bytes"]
    ]
    problems += [
        f"{r['key']}: row {r['disorder']} repeats or precedes a key (duplicates)"
        for r in readable
        if r["disorder"] is not None
    ]
    if len({r["schema"] for r in readable}) > 1:
        problems.append("the outputs' schemas differ")
    spans = sorted((p, first, last, r["key"]) for r in readable for p, first, last, _ in r["ranges"])
    for (p, _, last, key), (q, first, _, other) in itertools.pairwise(spans):
        if p == q and first <= last:
            problems.append(f"{key} and {other} share keys of Kafka partition {p} (duplicates)")
    found = sum((KeyDigest.from_json(r["digest"]) for r in readable), KeyDigest())
    problems += found.differences(KeyDigest.from_json(manifest.expected))
    return problems
