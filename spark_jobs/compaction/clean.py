"""Clean-up, the last step: a swapped partition's inputs (raw files and replaced outputs of earlier runs) are deleted
once the grace period after the swap has passed, so queries that started before the swap still read them."""

from __future__ import annotations

from datetime import datetime

from spark_jobs.compaction.manifest import Manifest, ManifestState
from spark_jobs.compaction.work import Rewriter


def clean(rewriter: Rewriter, manifest: Manifest, key: str) -> None:
    """Delete what the swapped manifest at ``key`` replaced, unless the grace period is still running; then
    record the manifest as cleaned. A crash in the middle leaves it swapped: the next run deletes the rest."""
    now = rewriter.now()
    swapped = datetime.fromisoformat(manifest.swapped_at or now.isoformat())
    if swapped + rewriter.knobs.grace_period > now:
        return
    for doomed in manifest.due_for_deletion():
        if not doomed.startswith(manifest.output_prefix):
            rewriter.s3.delete_object(Bucket=rewriter.bucket, Key=doomed)
    manifest.advance(ManifestState.CLEANED, rewriter.now())
    rewriter.manifests.save(key, manifest)
