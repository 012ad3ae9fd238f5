"""The compactor job: merge closed partitions' small files into few large ones and swap their Glue partitions.

One run takes every table it is given and every due partition of them together: selection
(``spark_jobs.compaction.selection``), then the rewrite protocol (``spark_jobs.compaction.protocol``): one Spark job
writes all the partitions' outputs, one inspects them, and each partition then commits on its own. Iceberg tables
(``table_format: iceberg``) are compacted by table operations instead, table by table
(``spark_jobs.compaction.table_maintenance``). A table or partition that fails is reported and left as it was; the
others go on.

Runs overlap (the schedule, retries, a person's ``compact run``): a run first takes each table's lease
(``kafkalake.lease``) and skips a table another live run holds (``held by run <id> since <time>``), so one run at a
time plans, swaps and cleans a table's partitions; the leases are renewed in the background and released at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import (
    COMPACTOR_GRACE_MINUTES,
    COMPACTOR_MIN_INPUT_FILES,
    COMPACTOR_TARGET_FILE_MB,
)
from kafkalake.lease import Held, Lease, LeaseLost, kept_alive, quiet_spell
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from spark_jobs.common import Run, add_lease_argument, job_session
from spark_jobs.compaction.manifest import DONE_STATES
from spark_jobs.compaction.protocol import carry_forward
from spark_jobs.compaction.selection import select
from spark_jobs.compaction.table_maintenance import compact_tables
from spark_jobs.compaction.work import Action, Knobs, PartitionResult, Rewriter, Work, describe, table_name


class Compactor(Rewriter):
    """The rewriter whose work is every due partition of its tables (``run``)."""

    def run(self) -> list[PartitionResult]:
        """Every due partition of every table this run holds, those with late data first; failures are in the
        results (``Action.FAILED``), never raised; tables another run holds are ``Action.SKIPPED``."""
        held, results = self._take_leases()
        try:
            with kept_alive(list(self.leases.values()), quiet_spell(self.identity.lease_ttl)):
                iceberg = [t for t in held if t.spec.table_format == TableFormat.ICEBERG]
                work, selected = select(self, [t for t in held if t not in iceberg])
                carry_forward(self, work)
                results += compact_tables(self, iceberg)
            results += selected + [self._result(w) for w in work]
        finally:
            for lease in self.leases.values():
                try:
                    lease.release()
                except LeaseLost as lost:
                    self.say(str(lost))
            self.leases.clear()
        for result in results:
            if result.action == Action.FAILED:
                self.say(f"FAILED {result.table} {'/'.join(result.partition)}: {result.reason}")
        return results

    def _take_leases(self) -> tuple[list[Topic], list[PartitionResult]]:
        """The tables whose lease this run took; the others as results (skipped when held, failed on an error)."""
        held, results = [], []
        for topic in self.topics:
            key = topic.prefix.compaction_lease_key()
            try:
                lease = Lease.acquire(
                    self.s3, self.bucket, key, self.identity.run_id, ttl=self.identity.lease_ttl, now=self.now
                )
            except Held as busy:
                self.say(f"{table_name(topic)}: skipped: {busy}")
                results.append(PartitionResult(table_name(topic), [], Action.SKIPPED, reason=str(busy)))
                continue
            except Exception as exc:  # noqa: BLE001 - one table's failure never stops the others: reported
                results.append(PartitionResult(table_name(topic), [], Action.FAILED, reason=describe(exc)))
                continue
            self.leases[table_name(topic)] = lease
            held.append(topic)
        return held, results

    def _result(self, item: Work) -> PartitionResult:
        manifest = item.manifest
        done = not item.failure and manifest.state in DONE_STATES
        action = Action.COMPACTED if done else Action.SKIPPED if item.refused else Action.FAILED
        result = PartitionResult(
            item.table,
            manifest.partition,
            action,
            files_before=len(manifest.inputs),
            files_after=len(manifest.outputs),
            bytes_before=sum(manifest.inputs.values()),
            bytes_after=sum(manifest.outputs.values()),
            rows=manifest.rows,
            repacked=item.repacked,
            late=item.late,
            seconds={k: round(v, 3) for k, v in item.seconds.items()},
            reason=item.failure or item.refused,
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
    add_lease_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py compact --env staging --catalog catalog --table a --table b`` (EMR Serverless): one JSON
    line per partition; exits 1 when any table or partition failed, after all the others were done."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    catalog = load_topic_catalog(args.catalog)
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
    spark = job_session("kafkalake-compactor")
    run = Run.new(spark, timedelta(seconds=args.lease_ttl_seconds))
    results += Compactor(spark, endpoints, topics, knobs, run=run).run()
    for result in results:
        print(json.dumps(asdict(result)), flush=True)
    if any(result.action == Action.FAILED for result in results):
        sys.exit(1)
