"""The compactor: merge a closed partition's small files into few large ones and swap the Glue partition.

A plain Glue table has no atomic commit, so each partition gets one, recorded step by step in a manifest
(``spark_jobs.manifest``): planned → written → verified → swapped → cleaned. A run that finds a manifest carries it
forward from its state; a crash before ``written`` rewrites the run directory from scratch. A late file in the raw
directory is not in any manifest, so the next run takes it. File counts come from ``spark_jobs.sizing``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.aws import list_objects, make_client
from kafkalake.catalog import Topic, load_catalog
from kafkalake.glue import COMPLETE_PARAMETER, table_partitions
from kafkalake.layout import Partition, S3Location, parse_s3_uri, s3_uri
from kafkalake.settings import Endpoints
from spark_jobs.manifest import DONE_STATES, Manifest, ManifestState, ManifestStore
from spark_jobs.session import job_session
from spark_jobs.sizing import estimated_file_count, repacked_file_count

RUN_PARAMETER = "kafkalake.compaction_run"
MERGE_KEYS = ["_kafka_partition", "_kafka_offset"]


@dataclass(frozen=True)
class Knobs:
    target_file_bytes: int = 128 * 1024 * 1024
    min_input_files: int = 10
    max_bytes_per_run: int = 50 * 1024**3
    safety_delay: timedelta = timedelta(hours=2)
    grace_period: timedelta = timedelta(hours=1)
    """Longer than the longest query: inputs stay readable for queries that started before the swap."""


class Action(StrEnum):
    COMPACTED = "compacted"
    SKIPPED = "skipped"


@dataclass
class PartitionResult:
    partition: list[str]
    action: Action
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows: int = 0


class VerificationFailed(RuntimeError):
    """The merged files do not hold exactly the input rows; the partition is left as it was."""


class Compactor:
    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        topic: Topic,
        knobs: Knobs,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        say: Callable[[str], None] = print,
    ) -> None:
        self.spark, self.endpoints, self.topic, self.knobs = spark, endpoints, topic, knobs
        self.now, self.say = now, say
        self.s3, self.glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
        self.bucket = endpoints.bucket
        self.manifests = ManifestStore(self.s3, self.bucket)
        self._inputs: tuple[str, DataFrame] | None = None
        """The run whose inputs this process has read and cached (written, then verified, from one read)."""

    # --- selection -----------------------------------------------------------------------------------------------
    def partitions(self) -> list[dict[str, Any]]:
        """The table's partitions; none while the maintainer has not created the table (nothing archived yet)."""
        found = table_partitions(self.glue, self.topic.database, self.topic.table)
        if found is None:
            self.say(f"{self.topic.database}.{self.topic.table}: no table in Glue yet, nothing to compact")
        return found or []

    def closed(self, partition: dict[str, Any]) -> bool:
        """Marked complete by the maintainer, or older than the safety delay."""
        if partition.get("Parameters", {}).get(COMPLETE_PARAMETER) == "true":
            return True
        return Partition.from_values(partition["Values"]).end + self.knobs.safety_delay <= self.now()

    def run(self) -> list[PartitionResult]:
        results, budget = [], self.knobs.max_bytes_per_run
        for glue_partition in sorted(self.partitions(), key=lambda p: p["Values"]):
            if not self.closed(glue_partition):
                continue
            result = self.compact_partition(glue_partition, budget)
            budget -= result.bytes_before
            results.append(result)
        return results

    # --- one partition -------------------------------------------------------------------------------------------
    def _list(self, prefix: str) -> dict[str, int]:
        return list_objects(self.s3, self.bucket, prefix, ".parquet")

    def compact_partition(self, glue_partition: dict[str, Any], budget: int) -> PartitionResult:
        values = glue_partition["Values"]
        partition = Partition.from_values(values)
        manifest_key = self.topic.prefix.compaction_manifest_key(partition)
        manifest = self.manifests.load(manifest_key)
        if manifest is not None and manifest.state not in DONE_STATES:
            self.say(f"{values}: carrying forward a manifest left in state {manifest.state!r}")
            return self._carry_forward(manifest, manifest_key, glue_partition)
        if manifest is not None and manifest.state == ManifestState.SWAPPED:
            self._clean(manifest, manifest_key)
        fresh = self._plan(glue_partition, partition, manifest, budget)
        if isinstance(fresh, PartitionResult):
            return fresh
        fresh.advance(ManifestState.PLANNED, self.now())
        self.manifests.save(manifest_key, fresh)
        return self._carry_forward(fresh, manifest_key, glue_partition)

    def _plan(
        self, glue_partition: dict[str, Any], partition: Partition, manifest: Manifest | None, budget: int
    ) -> Manifest | PartitionResult:
        """A new manifest over the current compacted files plus the raw files no run took yet, or a skip."""
        values = glue_partition["Values"]
        current = glue_partition["StorageDescriptor"]["Location"]
        taken = set(manifest.inputs) | set(manifest.superseded) if manifest else set()
        raw = self._list(self.topic.prefix.data_prefix() + partition.path())
        late = {k: size for k, size in raw.items() if k not in taken}
        base = manifest.outputs if manifest and current.rstrip("/").endswith(manifest.run_id) else {}
        inputs = {**base, **late}
        needed = self.knobs.min_input_files if not base else 1
        if len(late) < needed or not late or sum(inputs.values()) > budget:
            return PartitionResult(values, Action.SKIPPED, files_before=len(inputs), bytes_before=0)
        run_id = hashlib.sha256("\n".join(sorted(inputs)).encode()).hexdigest()[:16]
        due = manifest.due_for_deletion() if manifest and manifest.state != ManifestState.CLEANED else {}
        return Manifest(
            values,
            run_id,
            inputs,
            f"{self.topic.prefix.compacted_prefix()}{partition.path()}run={run_id}/",
            previous_location=current,
            superseded={k: size for k, size in due.items() if k not in inputs},
        )

    def _carry_forward(self, manifest: Manifest, key: str, glue_partition: dict[str, Any]) -> PartitionResult:
        try:
            if manifest.state == ManifestState.PLANNED:
                started = time.monotonic()
                self._write(manifest)
                self._advance(manifest, key, ManifestState.WRITTEN, started)
            if manifest.state == ManifestState.WRITTEN:
                started = time.monotonic()
                try:
                    self._verify(manifest)
                except VerificationFailed:  # roll back: the next run writes the run directory again
                    manifest.advance(ManifestState.PLANNED, self.now())
                    self.manifests.save(key, manifest)
                    raise
                self._advance(manifest, key, ManifestState.VERIFIED, started)
            if manifest.state == ManifestState.VERIFIED:
                started = time.monotonic()
                self._swap(manifest, glue_partition)
                manifest.swapped_at = self.now().isoformat()
                self._advance(manifest, key, ManifestState.SWAPPED, started)
        finally:
            self._drop_inputs()  # the cached inputs live from the write to the verification
        return PartitionResult(
            manifest.partition,
            Action.COMPACTED,
            files_before=len(manifest.inputs),
            files_after=len(manifest.outputs),
            bytes_before=sum(manifest.inputs.values()),
            bytes_after=sum(manifest.outputs.values()),
            rows=manifest.rows,
        )

    def _advance(self, manifest: Manifest, key: str, state: ManifestState, started: float) -> None:
        manifest.advance(state, self.now())
        self.manifests.save(key, manifest)
        self.say(f"{'/'.join(manifest.partition)}: {state} in {time.monotonic() - started:.1f} s")

    def _read(self, keys: Sequence[str]) -> DataFrame:
        paths = [S3Location(self.bucket, k).uri() for k in keys]
        return self.spark.read.option("mergeSchema", "true").parquet(*paths)

    def _write(self, manifest: Manifest) -> None:
        """Bin-pack to the target size: written once at the estimate, measured, and re-packed from memory only
        when the files miss the target by more than the tolerance."""
        rows = self._read(sorted(manifest.inputs)).persist()
        self._inputs = (manifest.run_id, rows)
        files = estimated_file_count(sum(manifest.inputs.values()), self.knobs.target_file_bytes)
        for _ in range(2):
            for stale in self._list(manifest.output_prefix):  # a crashed or resized attempt: start over
                self.s3.delete_object(Bucket=self.bucket, Key=stale)
            merge(rows, files).write.mode("overwrite").parquet(S3Location(self.bucket, manifest.output_prefix).uri())
            manifest.outputs = self._list(manifest.output_prefix)
            wanted = repacked_file_count(list(manifest.outputs.values()), self.knobs.target_file_bytes)
            if wanted is None:
                break
            sizes = ", ".join(f"{size / 2**20:.0f}" for size in sorted(manifest.outputs.values()))
            self.say(f"{manifest.partition}: {files} files ({sizes} MiB) miss the target; re-packing into {wanted}")
            files = wanted

    def _drop_inputs(self) -> None:
        if self._inputs is not None:
            self._inputs[1].unpersist()
            self._inputs = None

    def _verify(self, manifest: Manifest) -> None:
        """One pass over inputs and every file in the run directory: each input (partition, offset) is in
        exactly one output row and no output row comes from elsewhere. The offset ranges each output file
        covers go into the manifest."""
        manifest.outputs = self._list(manifest.output_prefix)  # what readers will see once swapped, not a memory
        outputs = self._read(sorted(manifest.outputs)).select(*MERGE_KEYS, F.input_file_name().alias("file")).persist()
        try:
            cached = self._inputs[1] if self._inputs and self._inputs[0] == manifest.run_id else None
            inputs = cached if cached is not None else self._read(sorted(manifest.inputs))  # after a crash: re-read
            check = coverage(inputs, outputs)
            if check["missing"] or check["extra"] or check["duplicates"]:
                raise VerificationFailed(f"{manifest.partition}: output does not hold exactly the inputs: {check}")
            ranges = (
                outputs.groupBy("file", "_kafka_partition")
                .agg(F.min("_kafka_offset").alias("first"), F.max("_kafka_offset").alias("last"))
                .collect()
            )
        finally:
            outputs.unpersist()
        manifest.rows = check["rows"]
        manifest.output_ranges = {}
        for row in sorted(ranges, key=lambda r: (r["file"], r["_kafka_partition"])):
            name = parse_s3_uri(row["file"]).key
            manifest.output_ranges.setdefault(name, []).append([row["_kafka_partition"], row["first"], row["last"]])

    def _swap(self, manifest: Manifest, glue_partition: dict[str, Any]) -> None:
        descriptor = dict(glue_partition["StorageDescriptor"])
        descriptor["Location"] = s3_uri(self.bucket, manifest.output_prefix)
        update = {
            "Values": manifest.partition,
            "StorageDescriptor": descriptor,
            "Parameters": {**glue_partition.get("Parameters", {}), RUN_PARAMETER: manifest.run_id},
        }
        self.glue.update_partition(
            DatabaseName=self.topic.database,
            TableName=self.topic.table,
            PartitionValueList=manifest.partition,
            PartitionInput=update,
        )

    def _clean(self, manifest: Manifest, key: str) -> None:
        """Delete the inputs (raw files and replaced compacted files) once the grace period has passed."""
        swapped = datetime.fromisoformat(manifest.swapped_at or self.now().isoformat())
        if swapped + self.knobs.grace_period > self.now():
            return
        for doomed in manifest.due_for_deletion():
            if not doomed.startswith(manifest.output_prefix):
                self.s3.delete_object(Bucket=self.bucket, Key=doomed)
        manifest.advance(ManifestState.CLEANED, self.now())
        self.manifests.save(key, manifest)


def coverage(inputs: DataFrame, outputs: DataFrame) -> dict[str, int]:
    """Per (Kafka partition, offset): inputs with no output row (missing), output rows with no input (extra),
    output rows beyond the first (duplicates), and the output rows."""
    tagged = inputs.select(*MERGE_KEYS, F.lit(1).alias("ins"), F.lit(0).alias("outs")).unionByName(
        outputs.select(*MERGE_KEYS, F.lit(0).alias("ins"), F.lit(1).alias("outs"))
    )
    per_key = tagged.groupBy(*MERGE_KEYS).agg(F.sum("ins").alias("ins"), F.sum("outs").alias("outs"))
    check = per_key.agg(
        F.sum(F.when(F.col("outs") == 0, 1).otherwise(0)).alias("missing"),
        F.sum(F.when(F.col("ins") == 0, 1).otherwise(0)).alias("extra"),
        F.sum(F.greatest(F.col("outs") - 1, F.lit(0))).alias("duplicates"),
        F.sum("outs").alias("rows"),
    ).first()
    return {k: int(check[k] or 0) if check else 0 for k in ("missing", "extra", "duplicates", "rows")}


def merge(frame: DataFrame, files: int) -> DataFrame:
    """Rows sorted by Kafka partition and offset, one duplicate (partition, offset) kept, in ``files`` ranges."""
    # Range partitioning by the keys already clusters duplicates, so the de-duplication needs no second shuffle
    # (measured on 420 files / 320 MiB: 51 s against 56 s de-duplicating first).
    return frame.repartitionByRange(files, *MERGE_KEYS).dropDuplicates(MERGE_KEYS).sortWithinPartitions(*MERGE_KEYS)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compactor", description="Compact closed partitions of a table.")
    parser.add_argument("--table", action="append", required=True, help="topic, Kafka topic or db.table; repeatable")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    parser.add_argument("--target-file-mb", type=int, default=128)
    parser.add_argument("--min-input-files", type=int, default=10)
    parser.add_argument("--grace-minutes", type=int, default=60)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py compact --env staging --catalog catalog --table sensor-readings`` (EMR Serverless)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    catalog = load_catalog(args.catalog)
    knobs = Knobs(
        target_file_bytes=args.target_file_mb * 1024 * 1024,
        min_input_files=args.min_input_files,
        grace_period=timedelta(minutes=args.grace_minutes),
    )
    spark = job_session("kafkalake-compactor")
    for table in args.table:
        for result in Compactor(spark, endpoints, catalog.get(table, args.env), knobs).run():
            print(json.dumps({"table": table, **asdict(result)}))
