"""Selection, the compactor's first step: which partitions this run takes, each as a ``Work`` with its manifest.

A partition is due when it is closed (marked complete by the maintainer, or older than the safety delay:
``closed_until``) and holds
at least ``min_input_files`` files no earlier run took (one is enough next to an earlier run's output: a late
file), within the run's byte budget; partitions with a late-data marker come first. A partition whose location is
still an output of the legacy layout (``kafkalake.layout.TablePrefix.legacy_compacted_prefix``) is due as it is:
its files are rewritten under the table's location and deleted after the grace period, a few per run within the
budget, so SDK for pandas and Lake Formation can read it too. A manifest that is not done is
carried forward from its state; a swapped one is cleaned first (``spark_jobs.compaction.clean``), then its
outputs become inputs of the next run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kafkalake.aws import list_objects
from kafkalake.glue import COMPLETE_PARAMETER, table_partitions
from kafkalake.layout import LATE_DATA_FILE, Partition
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from spark_jobs.compaction.clean import clean
from spark_jobs.compaction.manifest import DONE_STATES, Manifest, ManifestState
from spark_jobs.compaction.work import Action, Knobs, PartitionResult, Rewriter, Work, describe, table_name


def select(rewriter: Rewriter, topics: Sequence[Topic]) -> tuple[list[Work], list[PartitionResult]]:
    """Every due partition of every table, those with late data first, as work; the rest as results (skipped,
    or failed with the reason: a table's failure never stops the others)."""
    results: list[PartitionResult] = []
    candidates: list[tuple[bool, Topic, dict[str, Any]]] = []
    for topic in topics:
        try:
            candidates += [(late, topic, p) for late, p in _candidates(rewriter, topic)]
        except Exception as exc:  # noqa: BLE001 - one table's failure never stops the others: reported
            results.append(PartitionResult(table_name(topic), [], Action.FAILED, reason=describe(exc)))
    work: list[Work] = []
    broken: set[str] = set()
    budget = rewriter.knobs.max_bytes_per_run
    for late, topic, glue_partition in sorted(candidates, key=lambda c: not c[0]):  # stable: late ones first
        if table_name(topic) in broken:
            continue
        try:
            planned = plan_partition(rewriter, topic, glue_partition, budget, late=late)
        except Exception as exc:  # noqa: BLE001 - as above; the table's other partitions are left for later
            broken.add(table_name(topic))
            results.append(
                PartitionResult(table_name(topic), glue_partition["Values"], Action.FAILED, reason=describe(exc))
            )
            continue
        if isinstance(planned, PartitionResult):
            results.append(planned)
        else:
            work.append(planned)
            budget -= sum(planned.manifest.inputs.values())
    return work, results


def _candidates(rewriter: Rewriter, topic: Topic) -> list[tuple[bool, dict[str, Any]]]:
    """The table's closed partitions, each with whether the maintainer saw late data land in it."""
    s3, bucket = rewriter.s3, rewriter.bucket
    partitions = table_partitions(rewriter.glue, topic.database, topic.table)
    if partitions is None:
        if list_objects(s3, bucket, topic.prefix.data_prefix(), ".parquet"):
            raise LookupError(
                f"table {table_name(topic)} is not in Glue, yet s3://{bucket}/{topic.prefix.data_prefix()} "
                "holds data: the maintainer has not created it or it was deleted; run the maintainer "
                "(`kafkalake maintain --once`) or `kafkalake reconcile`, then compact again"
            )
        rewriter.say(f"{table_name(topic)}: nothing archived yet, nothing to compact")
        return []
    markers = set(list_objects(s3, bucket, topic.prefix.late_data_prefix(), LATE_DATA_FILE))
    return [
        (topic.prefix.late_data_key(Partition.from_values(p["Values"])) in markers, p)
        for p in sorted(partitions, key=lambda p: p["Values"])
        if _closed(rewriter, p)
    ]


def _closed(rewriter: Rewriter, partition: dict[str, Any]) -> bool:
    """Marked complete by the maintainer, or older than the safety delay."""
    if partition.get("Parameters", {}).get(COMPLETE_PARAMETER) == "true":
        return True
    return Partition.from_values(partition["Values"]).end <= closed_until(rewriter.knobs, rewriter.now())


def closed_until(knobs: Knobs, now: datetime) -> datetime:
    """Every hour that ends at or before this instant (a whole hour, UTC) is closed by age: it ended at least the
    safety delay ago, so no new data is expected in it (an Iceberg table's closed hours are these alone: no
    partition of it is marked complete)."""
    return (now - knobs.safety_delay).astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def plan_partition(
    rewriter: Rewriter,
    topic: Topic,
    glue_partition: dict[str, Any],
    budget: int,
    *,
    late: bool,
    erase: list[list[int]] | None = None,
) -> Work | PartitionResult:
    """The partition's manifest carried forward, or a new one (inputs listed once) stored before any write. With
    ``erase`` (an erasure's [Kafka partition, offset] keys) every current file is rewritten without those rows,
    however few files and whatever the budget; a manifest still in progress is carried forward first, as it is."""
    values = glue_partition["Values"]
    partition = Partition.from_values(values)
    key = topic.prefix.compaction_manifest_key(partition)
    manifest = rewriter.manifests.load(key)
    if manifest is not None and manifest.state not in DONE_STATES:
        rewriter.say(f"{table_name(topic)} {'/'.join(values)}: carrying forward a manifest in state {manifest.state!r}")
        if manifest.state == ManifestState.WRITTEN and not manifest.expected:  # from before digests
            manifest.advance(ManifestState.PLANNED, rewriter.now())
        return Work(topic, manifest, key, late=late)
    if manifest is not None and manifest.state == ManifestState.SWAPPED:
        clean(rewriter, manifest, key)
    current = glue_partition["StorageDescriptor"]["Location"]
    taken = set(manifest.inputs) | set(manifest.superseded) if manifest else set()
    raw = list_objects(rewriter.s3, rewriter.bucket, topic.prefix.data_prefix() + partition.path(), ".parquet")
    untaken = {k: size for k, size in raw.items() if k not in taken}
    base = manifest.outputs if manifest and current.rstrip("/").endswith(manifest.run_id) else {}
    inputs = {**base, **untaken}
    needed = rewriter.knobs.min_input_files if not base else 1
    if late and not untaken:  # an earlier run already took the late files: the marker is stale
        rewriter.s3.delete_object(Bucket=rewriter.bucket, Key=topic.prefix.late_data_key(partition))
    moving = bool(base) and parse_s3_uri(current).key.startswith(topic.prefix.legacy_compacted_prefix())
    too_few = not moving and (len(untaken) < needed or not untaken)
    if erase is None and (too_few or sum(inputs.values()) > budget):
        return PartitionResult(table_name(topic), values, Action.SKIPPED, files_before=len(inputs))
    erased = [f"{p}+{o}" for p, o in sorted(erase or [])]
    run_id = hashlib.sha256("\n".join([*sorted(inputs), *erased]).encode()).hexdigest()[:16]
    due = manifest.due_for_deletion() if manifest and manifest.state != ManifestState.CLEANED else {}
    fresh = Manifest(
        values,
        run_id,
        inputs,
        topic.prefix.compaction_output_prefix(partition, run_id),
        previous_location=current,
        superseded={k: size for k, size in due.items() if k not in inputs},
        output_ranges={k: v for k, v in manifest.output_ranges.items() if k in base} if manifest else {},
        erase=sorted(erase or []),
    )
    work = Work(topic, fresh, key, late=late, planned_here=True)
    rewriter.advance(work, ManifestState.PLANNED)
    return work
