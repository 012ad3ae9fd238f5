"""The compactor job: merge closed partitions' small files into few large ones and swap their Glue partitions.

One run takes every table it is given and every due partition of them together: selection
(``spark_jobs.compaction.selection``), then the rewrite protocol (``spark_jobs.compaction.protocol``): one Spark job
writes all the partitions' outputs, one inspects them, and each partition then commits on its own. A table or
partition that fails is reported and left as it was; the others go on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from kafkalake.catalog import Topic, load_catalog
from kafkalake.jobspec import COMPACTOR_GRACE_MINUTES, COMPACTOR_MIN_INPUT_FILES, COMPACTOR_TARGET_FILE_MB
from kafkalake.settings import Endpoints
from spark_jobs.common import job_session
from spark_jobs.compaction.manifest import DONE_STATES
from spark_jobs.compaction.protocol import carry_forward
from spark_jobs.compaction.selection import select
from spark_jobs.compaction.work import Action, Knobs, PartitionResult, Rewriter, Work


class Compactor(Rewriter):
    """The rewriter whose work is every due partition of ``topics`` (``run``)."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        topics: Sequence[Topic],
        knobs: Knobs,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        say: Callable[[str], None] = print,
    ) -> None:
        super().__init__(spark, endpoints, knobs, now=now, say=say)
        self.topics = topics

    def run(self) -> list[PartitionResult]:
        """Every due partition of every table, those with late data first; failures are in the results
        (``Action.FAILED``), never raised."""
        work, results = select(self, self.topics)
        carry_forward(self, work)
        results += [self._result(w) for w in work]
        for result in results:
            if result.action == Action.FAILED:
                self.say(f"FAILED {result.table} {'/'.join(result.partition)}: {result.reason}")
        return results

    def _result(self, item: Work) -> PartitionResult:
        manifest = item.manifest
        done = not item.failure and manifest.state in DONE_STATES
        result = PartitionResult(
            item.table,
            manifest.partition,
            Action.COMPACTED if done else Action.FAILED,
            files_before=len(manifest.inputs),
            files_after=len(manifest.outputs),
            bytes_before=sum(manifest.inputs.values()),
            bytes_after=sum(manifest.outputs.values()),
            rows=manifest.rows,
            repacked=item.repacked,
            late=item.late,
            seconds={k: round(v, 3) for k, v in item.seconds.items()},
            reason=item.failure,
        )
        if done:
            self.say(
                f"{item.name}: {result.files_before} files ({result.bytes_before / 2**20:.1f} MiB) → "
                f"{result.files_after} ({result.bytes_after / 2**20:.1f} MiB), {result.rows} rows; "
                + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
            )
        return result


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compactor", description="Compact the closed partitions of tables.")
    parser.add_argument("--table", action="append", required=True, help="topic, Kafka topic or db.table; repeatable")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    parser.add_argument("--target-file-mb", type=int, default=COMPACTOR_TARGET_FILE_MB)
    parser.add_argument("--min-input-files", type=int, default=COMPACTOR_MIN_INPUT_FILES)
    parser.add_argument("--grace-minutes", type=int, default=COMPACTOR_GRACE_MINUTES)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py compact --env staging --catalog catalog --table a --table b`` (EMR Serverless): one JSON
    line per partition; exits 1 when any table or partition failed, after all the others were done."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    catalog = load_catalog(args.catalog)
    knobs = Knobs(
        target_file_bytes=args.target_file_mb * 1024 * 1024,
        min_input_files=args.min_input_files,
        grace_period=timedelta(minutes=args.grace_minutes),
    )
    topics, results = [], []
    for name in args.table:
        try:
            topics.append(catalog.get(name, args.env))
        except KeyError as exc:
            results.append(PartitionResult(name, [], Action.FAILED, reason=str(exc.args[0])))
    results += Compactor(job_session("kafkalake-compactor"), endpoints, topics, knobs).run()
    for result in results:
        print(json.dumps(asdict(result)), flush=True)
    if any(result.action == Action.FAILED for result in results):
        sys.exit(1)
