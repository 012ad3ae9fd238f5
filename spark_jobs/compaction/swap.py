"""Swap, the commit: one ``UpdatePartition`` points the Glue partition at the verified run directory, so readers
switch from the inputs to the outputs at once; the manifest records it, and a late-data marker the maintainer
left for the partition goes (the rewrite took every file the partition held when it was listed)."""

from __future__ import annotations

import time

from kafkalake.layout import Partition, s3_uri
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.work import Rewriter, Work

RUN_PARAMETER = "kafkalake.compaction_run"
"""The Glue partition parameter naming the run whose output the partition points at."""


def swap(rewriter: Rewriter, item: Work) -> None:
    """Point the item's Glue partition at its run directory (keeping its other properties), then mark it swapped."""
    started = time.monotonic()
    manifest = item.manifest
    descriptor = dict(item.glue_partition["StorageDescriptor"])
    descriptor["Location"] = s3_uri(rewriter.bucket, manifest.output_prefix)
    update = {
        "Values": manifest.partition,
        "StorageDescriptor": descriptor,
        "Parameters": {**item.glue_partition.get("Parameters", {}), RUN_PARAMETER: manifest.run_id},
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
