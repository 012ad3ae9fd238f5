"""Swap, the commit: one ``UpdatePartition`` points the Glue partition at the verified run directory, so readers
switch from the inputs to the outputs at once; the manifest records it, and a late-data marker the maintainer
left for the partition goes (the rewrite took every file the partition held when it was listed).

Glue's ``UpdatePartition`` has no optimistic lock, so the swap is fenced by the run's lease on the table (renewed
right before it) and refused when the partition no longer points where it pointed when the run planned it (another
run swapped it since): then nothing changes and the item reports why."""

from __future__ import annotations

import time

from kafkalake.layout import Partition
from kafkalake.s3_location import s3_uri
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.work import Rewriter, Work

RUN_PARAMETER = "kafkalake.compaction_run"
"""The Glue partition parameter naming the run whose output the partition points at."""


def manifest_location(rewriter: Rewriter, item: Work) -> str:
    """Where the item's partition points once swapped: its run directory."""
    return s3_uri(rewriter.bucket, item.manifest.output_prefix)


def swap(rewriter: Rewriter, item: Work) -> None:
    """Point the item's Glue partition at its run directory (keeping its other properties as they are at the swap,
    read in the same call that checks its location), then mark it swapped."""
    started = time.monotonic()
    manifest = item.manifest
    rewriter.fence(item)
    current = rewriter.glue.get_partition(
        DatabaseName=item.topic.database, TableName=item.topic.table, PartitionValues=manifest.partition
    )["Partition"]
    now_at = current["StorageDescriptor"]["Location"]
    if manifest.previous_location and now_at not in (manifest.previous_location, manifest_location(rewriter, item)):
        item.refused = (
            f"swap refused: the partition points at {now_at}, not at {manifest.previous_location} as when this run "
            f"planned it (another run swapped it); nothing changed, s3://{rewriter.bucket}/{item.key} stays for a look"
        )
        return
    update = {  # the partition as it is now, not as selected: what it gained since (a parameter) is kept
        "Values": manifest.partition,
        "StorageDescriptor": {**current["StorageDescriptor"], "Location": manifest_location(rewriter, item)},
        "Parameters": {**current.get("Parameters", {}), RUN_PARAMETER: manifest.run_id},
    }
    rewriter.glue.update_partition(
        DatabaseName=item.topic.database,
        TableName=item.topic.table,
        PartitionValueList=manifest.partition,
        PartitionInput=update,
    )
    manifest.swapped_at = rewriter.now().isoformat()
    rewriter.advance(item, ManifestState.SWAPPED)
    if item.late:  # a file landing after the plan was listed is in no manifest: the next run takes it anyway
        partition = Partition.from_values(manifest.partition)
        rewriter.s3.delete_object(Bucket=rewriter.bucket, Key=item.topic.prefix.late_data_key(partition))
    item.seconds["swap"] += time.monotonic() - started
