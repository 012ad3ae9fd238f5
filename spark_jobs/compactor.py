"""The compactor: merge closed partitions' small files into few large ones and swap their Glue partitions.

A plain Glue table has no atomic commit, so each partition gets one, recorded step by step in a manifest
(``spark_jobs.manifest``): planned → written → verified → swapped → cleaned. A run that finds a manifest carries it
forward from its state; a crash before ``written`` rewrites the run directory from scratch. A late file in the raw
directory is not in any manifest, so the next run takes it.

One run takes every table it is given and every due partition of them together: one Spark job writes all the
partitions' outputs (one task per output file, ``spark_jobs.merging``), one job inspects them, and each partition
then commits on its own. A table or partition that fails is reported and left as it was; the others go on.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from kafkalake.aws import list_objects, make_client
from kafkalake.catalog import Topic, load_catalog
from kafkalake.footer import read_footer
from kafkalake.glue import COMPLETE_PARAMETER, table_partitions
from kafkalake.jobspec import COMPACTOR_GRACE_MINUTES, COMPACTOR_MIN_INPUT_FILES, COMPACTOR_TARGET_FILE_MB
from kafkalake.layout import LATE_DATA_FILE, LayoutError, Partition, parse_data_key, s3_uri
from kafkalake.settings import Endpoints
from spark_jobs.binning import UNBOUNDED, InputFile, Key, plan_bins
from spark_jobs.digest import KeyDigest
from spark_jobs.manifest import DONE_STATES, Manifest, ManifestState, ManifestStore
from spark_jobs.merging import KEY_COLUMNS, InspectTask, MergeTask, inspect, merge
from spark_jobs.session import job_session
from spark_jobs.sizing import estimated_file_count, repacked_file_count

RUN_PARAMETER = "kafkalake.compaction_run"
VERIFICATION_FAILED = "verification failed: the output does not hold exactly the inputs"
MAX_REASON = 500
"""Characters of a failed Spark job's message a result repeats (Java stack traces run to pages)."""
FOOTER_SAMPLE = 8
"""Input footers read per partition to estimate the output's size (stored bytes of data per file byte)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Knobs:
    target_file_bytes: int = COMPACTOR_TARGET_FILE_MB * 1024 * 1024
    min_input_files: int = COMPACTOR_MIN_INPUT_FILES
    max_bytes_per_run: int = 50 * 1024**3
    safety_delay: timedelta = timedelta(hours=2)
    grace_period: timedelta = timedelta(minutes=COMPACTOR_GRACE_MINUTES)
    """Longer than the longest query: inputs stay readable for queries that started before the swap."""


class Action(StrEnum):
    COMPACTED = "compacted"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class PartitionResult:
    table: str
    partition: list[str]
    action: Action
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows: int = 0
    repacked: bool = False
    late: bool = False
    """Taken first: the maintainer saw objects land after the partition's last compaction."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Task seconds spent writing and inspecting this partition's files, wall seconds of its swap."""
    reason: str = ""


@dataclass
class _Work:
    """One partition being carried forward in this run."""

    topic: Topic
    glue_partition: dict[str, Any]
    manifest: Manifest
    key: str
    late: bool = False
    """The maintainer left a late-data marker for this partition: its marker goes once the swap is done."""
    failure: str = ""
    repacked: bool = False
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def name(self) -> str:
        return f"{self.topic.database}.{self.topic.table} {'/'.join(self.manifest.partition)}"

    def fail(self, reason: str) -> None:
        self.failure = self.failure or reason


class Compactor:
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
        self.spark, self.endpoints, self.topics, self.knobs = spark, endpoints, topics, knobs
        self.now, self.say = now, say
        self.s3, self.glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
        self.bucket = endpoints.bucket
        self.manifests = ManifestStore(self.s3, self.bucket)

    def run(self) -> list[PartitionResult]:
        """Every due partition of every table, those with late data first; failures are in the results
        (``Action.FAILED``), never raised."""
        results: list[PartitionResult] = []
        candidates: list[tuple[bool, Topic, dict[str, Any]]] = []
        for topic in self.topics:
            try:
                candidates += [(late, topic, p) for late, p in self._candidates(topic)]
            except Exception as exc:  # noqa: BLE001 - one table's failure never stops the others: reported
                results.append(PartitionResult(_table(topic), [], Action.FAILED, reason=_describe(exc)))
        work: list[_Work] = []
        broken: set[str] = set()
        budget = self.knobs.max_bytes_per_run
        for late, topic, glue_partition in sorted(candidates, key=lambda c: not c[0]):  # stable: late ones first
            if _table(topic) in broken:
                continue
            try:
                planned = self._plan(topic, glue_partition, budget, late=late)
            except Exception as exc:  # noqa: BLE001 - as above; the table's other partitions are left for later
                broken.add(_table(topic))
                results.append(
                    PartitionResult(_table(topic), glue_partition["Values"], Action.FAILED, reason=_describe(exc))
                )
                continue
            if isinstance(planned, PartitionResult):
                results.append(planned)
            else:
                work.append(planned)
                budget -= sum(planned.manifest.inputs.values())
        self._write([w for w in work if w.manifest.state == ManifestState.PLANNED])
        self._verify([w for w in work if w.manifest.state == ManifestState.WRITTEN and not w.failure])
        for item in work:
            if item.manifest.state == ManifestState.VERIFIED and not item.failure:
                self._isolated(item, "swap", self._swap)
        results += [self._result(w) for w in work]
        for result in results:
            if result.action == Action.FAILED:
                self.say(f"FAILED {result.table} {'/'.join(result.partition)}: {result.reason}")
        return results

    # --- selection -----------------------------------------------------------------------------------------------
    def _candidates(self, topic: Topic) -> list[tuple[bool, dict[str, Any]]]:
        """The table's closed partitions, each with whether the maintainer saw late data land in it."""
        partitions = table_partitions(self.glue, topic.database, topic.table)
        if partitions is None:
            if list_objects(self.s3, self.bucket, topic.prefix.data_prefix(), ".parquet"):
                raise LookupError(
                    f"table {_table(topic)} is not in Glue, yet s3://{self.bucket}/{topic.prefix.data_prefix()} "
                    "holds data: the maintainer has not created it or it was deleted; run the maintainer "
                    "(`kafkalake maintain --once`) or `kafkalake reconcile`, then compact again"
                )
            self.say(f"{_table(topic)}: nothing archived yet, nothing to compact")
            return []
        markers = set(list_objects(self.s3, self.bucket, topic.prefix.late_data_prefix(), LATE_DATA_FILE))
        return [
            (topic.prefix.late_data_key(Partition.from_values(p["Values"])) in markers, p)
            for p in sorted(partitions, key=lambda p: p["Values"])
            if self._closed(p)
        ]

    def _closed(self, partition: dict[str, Any]) -> bool:
        """Marked complete by the maintainer, or older than the safety delay."""
        if partition.get("Parameters", {}).get(COMPLETE_PARAMETER) == "true":
            return True
        return Partition.from_values(partition["Values"]).end + self.knobs.safety_delay <= self.now()

    def _plan(
        self, topic: Topic, glue_partition: dict[str, Any], budget: int, *, late: bool
    ) -> _Work | PartitionResult:
        values = glue_partition["Values"]
        partition = Partition.from_values(values)
        key = topic.prefix.compaction_manifest_key(partition)
        manifest = self.manifests.load(key)
        if manifest is not None and manifest.state not in DONE_STATES:
            self.say(f"{_table(topic)} {'/'.join(values)}: carrying forward a manifest in state {manifest.state!r}")
            if manifest.state == ManifestState.WRITTEN and not manifest.expected:  # from before digests
                manifest.advance(ManifestState.PLANNED, self.now())
            return _Work(topic, glue_partition, manifest, key, late=late)
        if manifest is not None and manifest.state == ManifestState.SWAPPED:
            self._clean(manifest, key)
        current = glue_partition["StorageDescriptor"]["Location"]
        taken = set(manifest.inputs) | set(manifest.superseded) if manifest else set()
        raw = list_objects(self.s3, self.bucket, topic.prefix.data_prefix() + partition.path(), ".parquet")
        untaken = {k: size for k, size in raw.items() if k not in taken}
        base = manifest.outputs if manifest and current.rstrip("/").endswith(manifest.run_id) else {}
        inputs = {**base, **untaken}
        needed = self.knobs.min_input_files if not base else 1
        if late and not untaken:  # an earlier run already took the late files: the marker is stale
            self.s3.delete_object(Bucket=self.bucket, Key=topic.prefix.late_data_key(partition))
        if len(untaken) < needed or not untaken or sum(inputs.values()) > budget:
            return PartitionResult(_table(topic), values, Action.SKIPPED, files_before=len(inputs))
        run_id = hashlib.sha256("\n".join(sorted(inputs)).encode()).hexdigest()[:16]
        due = manifest.due_for_deletion() if manifest and manifest.state != ManifestState.CLEANED else {}
        fresh = Manifest(
            values,
            run_id,
            inputs,
            f"{topic.prefix.compacted_prefix()}{partition.path()}run={run_id}/",
            previous_location=current,
            superseded={k: size for k, size in due.items() if k not in inputs},
            output_ranges={k: v for k, v in manifest.output_ranges.items() if k in base} if manifest else {},
        )
        fresh.advance(ManifestState.PLANNED, self.now())
        self.manifests.save(key, fresh)
        return _Work(topic, glue_partition, fresh, key, late=late)

    # --- write ---------------------------------------------------------------------------------------------------
    def _write(self, items: list[_Work]) -> None:
        """All partitions' outputs in one Spark job; re-packed (a second job) only where the sizes miss far."""
        for item in items:
            self._isolated(item, "write", self._clear_outputs)
        files = {item.key: self._input_files(item) for item in items if not item.failure}
        wanted = {
            key: estimated_file_count(sum(f.size for f in found), self.knobs.target_file_bytes)
            for key, found in files.items()
        }
        written = self._merge([i for i in items if i.key in files], files, wanted)
        repack = {}
        for item in written:
            sizes = list(item.manifest.outputs.values())
            count = repacked_file_count(sizes, self.knobs.target_file_bytes)
            if count is not None:
                mib = ", ".join(f"{size / 2**20:.1f}" for size in sorted(sizes))
                self.say(f"{item.name}: {len(sizes)} files ({mib} MiB) miss the target; re-packing into {count}")
                repack[item.key] = count
                item.repacked = True
                self._isolated(item, "write", self._clear_outputs)
        redone = {i.key for i in self._merge([i for i in written if i.key in repack], files, repack)}
        for item in written:
            if not item.failure and (item.key not in repack or item.key in redone):
                self._isolated(item, "write", lambda i: self._advance(i, ManifestState.WRITTEN))

    def _clear_outputs(self, item: _Work) -> None:
        """A crashed or re-packed attempt's files: the run directory is written from scratch."""
        for stale in list_objects(self.s3, self.bucket, item.manifest.output_prefix):
            self.s3.delete_object(Bucket=self.bucket, Key=stale)

    def _merge(self, items: list[_Work], files: dict[str, list[InputFile]], wanted: dict[str, int]) -> list[_Work]:
        """Write the bins of ``items``; the items whose every bin was written (outputs and digest recorded)."""
        tasks = []
        for item in items:
            for index, chosen in enumerate(plan_bins(files[item.key], wanted[item.key])):
                output = f"{item.manifest.output_prefix}part-{index:05d}.parquet"
                tasks.append(
                    (
                        chosen.size,
                        MergeTask(item.key, self.endpoints, self.bucket, chosen.inputs, output, chosen.overlapping),
                    )
                )
        if not tasks:
            return []
        tasks.sort(key=lambda sized: -sized[0])  # largest first: the last tasks to start are the short ones
        started = time.monotonic()
        outcomes = self._tasks(merge, [task for _, task in tasks], f"compactor: write {len(tasks)} files")
        self.say(f"wrote {len(tasks)} files for {len(items)} partitions in {time.monotonic() - started:.1f} s")
        by_work = _grouped(outcomes)
        done = []
        for item in items:
            mine = by_work.get(item.key, [])
            errors = [f"{o['output']}: {o['error']}" for o in mine if "error" in o]
            read = {key for o in mine if "error" not in o for key in o["input_rows"]}
            if errors:
                item.fail("write: " + "; ".join(errors))
            elif read != set(item.manifest.inputs):
                item.fail(f"write: inputs not read: {sorted(set(item.manifest.inputs) - read)}")
            else:
                total = sum((KeyDigest.from_json(o["inputs"]) for o in mine), KeyDigest())
                dropped = sum((KeyDigest.from_json(o["dropped"]) for o in mine), KeyDigest())
                item.manifest.expected = (total - dropped).to_json()
                item.manifest.dropped = dropped.keys
                item.manifest.outputs = {o["output"]: o["bytes"] for o in mine}
                item.seconds["write"] += sum(o["seconds"] for o in mine)
                done.append(item)
        return done

    def _input_files(self, item: _Work) -> list[InputFile]:
        """Each input's key range: from its name (raw files), the earlier manifest (compacted files) or its
        footer; and its size scaled by the stored-data share of a sample of footers."""
        ranges = item.manifest.output_ranges
        bounds: dict[str, tuple[Key, Key]] = {}
        for key in item.manifest.inputs:
            try:
                parsed = parse_data_key(key)
                bounds[key] = (
                    (parsed.kafka_partition, parsed.first_offset),
                    (parsed.kafka_partition, parsed.last_offset),
                )
            except LayoutError:
                if key in ranges:
                    spans = ranges[key]  # [kafka partition, first, last(, rows)] each
                    bounds[key] = (min((r[0], r[1]) for r in spans), max((r[0], r[2]) for r in spans))
        sample = sorted(item.manifest.inputs)[:: max(1, len(item.manifest.inputs) // FOOTER_SAMPLE)][:FOOTER_SAMPLE]
        unknown = [k for k in item.manifest.inputs if k not in bounds]
        with ThreadPoolExecutor(max_workers=16) as pool:
            read = pool.map(lambda key: read_footer(self.s3, self.bucket, key), sample + unknown)
            footers = dict(zip(sample + unknown, read, strict=True))
        for key in unknown:
            bounds[key] = _footer_bounds(footers[key])
        stored = sum(_stored_bytes(footers[k]) for k in sample)
        share = stored / sum(item.manifest.inputs[k] for k in sample) if stored else 1.0
        return [InputFile(k, max(1, int(size * share)), *bounds[k]) for k, size in item.manifest.inputs.items()]

    # --- verify --------------------------------------------------------------------------------------------------
    def _verify(self, items: list[_Work]) -> None:
        """Everything in each run directory, from footers and key columns only, against the write's digest."""
        listed = {}
        for item in items:
            listed[item.key] = self._isolated(
                item, "verify", lambda i: list_objects(self.s3, self.bucket, i.manifest.output_prefix)
            )
        tasks = [
            InspectTask(item.key, self.endpoints, self.bucket, key)
            for item in items
            if not item.failure
            for key in sorted(listed[item.key] or {})
            if key.endswith(".parquet")
        ]
        started = time.monotonic()
        reports = _grouped(self._tasks(inspect, tasks, f"compactor: inspect {len(tasks)} files"))
        if tasks:
            self.say(f"inspected {len(tasks)} files in {time.monotonic() - started:.1f} s")
        for item in items:
            if item.failure:
                continue
            problems = _problems(item.manifest, listed[item.key] or {}, reports.get(item.key, []))
            if problems:
                item.fail(f"{VERIFICATION_FAILED}: {'; '.join(problems)}")
                # the partition is left as it was; roll back: the next run writes the run directory again
                self._isolated(item, "verify", lambda i: self._advance(i, ManifestState.PLANNED))
                continue
            mine = reports[item.key]
            item.seconds["verify"] += sum(r["seconds"] for r in mine)
            item.manifest.outputs = dict(listed[item.key] or {})
            item.manifest.rows = sum(r["rows"] for r in mine)
            item.manifest.output_ranges = {r["key"]: r["ranges"] for r in sorted(mine, key=lambda r: r["key"])}
            self._isolated(item, "verify", lambda i: self._advance(i, ManifestState.VERIFIED))

    # --- swap and clean ------------------------------------------------------------------------------------------
    def _swap(self, item: _Work) -> None:
        started = time.monotonic()
        manifest = item.manifest
        descriptor = dict(item.glue_partition["StorageDescriptor"])
        descriptor["Location"] = s3_uri(self.bucket, manifest.output_prefix)
        update = {
            "Values": manifest.partition,
            "StorageDescriptor": descriptor,
            "Parameters": {**item.glue_partition.get("Parameters", {}), RUN_PARAMETER: manifest.run_id},
        }
        self.glue.update_partition(
            DatabaseName=item.topic.database,
            TableName=item.topic.table,
            PartitionValueList=manifest.partition,
            PartitionInput=update,
        )
        manifest.swapped_at = self.now().isoformat()
        self._advance(item, ManifestState.SWAPPED)
        if item.late:  # a file landing after the plan was listed is in no manifest: the next run takes it anyway
            partition = Partition.from_values(manifest.partition)
            self.s3.delete_object(Bucket=self.bucket, Key=item.topic.prefix.late_data_key(partition))
        item.seconds["swap"] += time.monotonic() - started

    def _advance(self, item: _Work, state: ManifestState) -> None:
        item.manifest.advance(state, self.now())
        self.manifests.save(item.key, item.manifest)

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

    # --- plumbing ------------------------------------------------------------------------------------------------
    def _tasks(self, function: Callable[[Any], dict[str, Any]], tasks: list[Any], what: str) -> list[dict[str, Any]]:
        if not tasks:
            return []
        context = self.spark.sparkContext
        context.setJobDescription(what)
        try:
            return context.parallelize(tasks, len(tasks)).map(function).collect()
        except Exception as exc:  # noqa: BLE001 - a lost worker fails the Spark job after its retries, not the run
            reason = f"the Spark job failed: {_describe(exc)[:MAX_REASON]}"
            return [
                {"work": t.work, "output": getattr(t, "output", ""), "key": getattr(t, "key", ""), "error": reason}
                for t in tasks
            ]
        finally:
            context.setJobDescription(None)  # type: ignore[arg-type]

    def _isolated(self, item: _Work, step: str, action: Callable[[_Work], T]) -> T | None:
        try:
            return action(item)
        except Exception as exc:  # noqa: BLE001 - one partition's failure never stops the others: reported
            item.fail(f"{step}: {_describe(exc)}")
            return None

    def _result(self, item: _Work) -> PartitionResult:
        manifest = item.manifest
        done = not item.failure and manifest.state in DONE_STATES
        result = PartitionResult(
            _table(item.topic),
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


def _table(topic: Topic) -> str:
    return f"{topic.database}.{topic.table}"


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _grouped(outcomes: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for outcome in outcomes:
        grouped[outcome["work"]].append(outcome)
    return grouped


def _footer_bounds(footer: pq.FileMetaData) -> tuple[Key, Key]:
    """The lowest and highest (partition, offset) the footer's statistics allow; unbounded without them."""
    names = footer.schema.names
    if not set(KEY_COLUMNS) <= set(names) or footer.num_row_groups == 0:
        return UNBOUNDED
    lows, highs = [], []
    for index in range(footer.num_row_groups):
        group = footer.row_group(index)
        stats = [group.column(names.index(name)).statistics for name in KEY_COLUMNS]
        if any(s is None or not s.has_min_max for s in stats):
            return UNBOUNDED
        lows.append((stats[0].min, stats[1].min))
        highs.append((stats[0].max, stats[1].max))
    return (min(p for p, _ in lows), min(o for _, o in lows)), (max(p for p, _ in highs), max(o for _, o in highs))


def _stored_bytes(footer: pq.FileMetaData) -> int:
    groups = (footer.row_group(i) for i in range(footer.num_row_groups))
    return sum(group.column(c).total_compressed_size for group in groups for c in range(group.num_columns))


def _problems(manifest: Manifest, listed: dict[str, int], reports: list[dict[str, Any]]) -> list[str]:
    """Why a run directory does not hold exactly the inputs' keys, one per line; none when it does."""
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
