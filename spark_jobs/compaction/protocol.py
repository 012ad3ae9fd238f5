"""The rewrite protocol: each unit of work carried forward from its manifest's state, write → verify → swap, every
partition on its own (a failure leaves that partition as it was and the others go on). Clean-up comes after the
grace period, at the selection of a later run (``spark_jobs.compaction.clean``)."""

from __future__ import annotations

from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.swap import swap
from spark_jobs.compaction.verify import verify
from spark_jobs.compaction.work import Rewriter, Work
from spark_jobs.compaction.write import write


def carry_forward(rewriter: Rewriter, work: list[Work]) -> None:
    """Planned items are written, written ones verified, verified ones swapped; a crash between any two steps is
    carried forward from the manifest by the next run."""
    write(rewriter, [w for w in work if w.manifest.state == ManifestState.PLANNED])
    verify(rewriter, [w for w in work if w.manifest.state == ManifestState.WRITTEN and not w.failure])
    for item in work:
        if item.manifest.state == ManifestState.VERIFIED and not item.failure:
            rewriter.isolated(item, "swap", lambda i: swap(rewriter, i))
