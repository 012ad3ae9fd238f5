"""Write, the second step: every item's output files in one Spark job, the manifests moved to ``written``.

Each output file is one task (``spark_jobs.compaction.merging``) over a bin of whole input files in key order
(``spark_jobs.compaction.binning``); their count is the inputs' stored bytes over the target size
(``spark_jobs.compaction.sizing``), and items whose files miss the target far are written again (a second job for
those only). While writing, each task takes the digest of every input key and of the keys it dropped: the manifest
records ``expected`` = inputs - dropped, which is what verification holds the output to, also after a crash. A
rewrite that leaves rows out on purpose reports them as dropped, and the same verification holds.
"""

from __future__ import annotations

import functools
import time

from kafkalake.aws import list_objects
from spark_jobs.compaction.binning import InputFile, plan_bins
from spark_jobs.compaction.digest import KeyDigest
from spark_jobs.compaction.inputs import input_files
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.merging import MergeTask, merge
from spark_jobs.compaction.sizing import estimated_file_count, repacked_file_count
from spark_jobs.compaction.work import Rewriter, Work, grouped


def write(rewriter: Rewriter, items: list[Work]) -> None:
    """All items' outputs in one Spark job; re-packed (a second job) only where the sizes miss far. Items whose
    every output was written and read all their inputs move to ``written``; the others are failed."""
    target = rewriter.knobs.target_file_bytes
    clear = functools.partial(_clear_outputs, rewriter)
    for item in items:
        if not item.planned_here:  # a carried-forward manifest's run directory may hold a crashed attempt's files
            rewriter.isolated(item, "write", clear)
    files = {item.key: input_files(rewriter.s3, rewriter.bucket, item.manifest) for item in items if not item.failure}
    wanted = {key: estimated_file_count(sum(f.size for f in found), target) for key, found in files.items()}
    written = _merge(rewriter, [i for i in items if i.key in files], files, wanted)
    repack = {}
    for item in written:
        sizes = list(item.manifest.outputs.values())
        count = repacked_file_count(sizes, target)
        if count is not None:
            mib = ", ".join(f"{size / 2**20:.1f}" for size in sorted(sizes))
            rewriter.say(f"{item.name}: {len(sizes)} files ({mib} MiB) miss the target; re-packing into {count}")
            repack[item.key] = count
            item.repacked = True
            rewriter.isolated(item, "write", clear)
    redone = {i.key for i in _merge(rewriter, [i for i in written if i.key in repack], files, repack)}
    for item in written:
        if not item.failure and (item.key not in repack or item.key in redone):
            rewriter.isolated(item, "write", lambda i: rewriter.advance(i, ManifestState.WRITTEN))


def _clear_outputs(rewriter: Rewriter, item: Work) -> None:
    """A crashed or re-packed attempt's files: the run directory is written from scratch."""
    for stale in list_objects(rewriter.s3, rewriter.bucket, item.manifest.output_prefix):
        rewriter.s3.delete_object(Bucket=rewriter.bucket, Key=stale)


def _merge(
    rewriter: Rewriter, items: list[Work], files: dict[str, list[InputFile]], wanted: dict[str, int]
) -> list[Work]:
    """Write the bins of ``items``; the items whose every bin was written (outputs and digest recorded)."""
    tasks = []
    for item in items:
        for index, chosen in enumerate(plan_bins(files[item.key], wanted[item.key])):
            output = f"{item.manifest.output_prefix}part-{index:05d}.parquet"
            erase = tuple((p, o) for p, o in item.manifest.erase)
            task = MergeTask(
                item.key, rewriter.endpoints, rewriter.bucket, chosen.inputs, output, chosen.overlapping, erase=erase
            )
            tasks.append((chosen.size, task))
    if not tasks:
        return []
    tasks.sort(key=lambda sized: -sized[0])  # largest first: the last tasks to start are the short ones
    started = time.monotonic()
    outcomes = rewriter.tasks(merge, [task for _, task in tasks], f"compactor: write {len(tasks)} files")
    rewriter.say(f"wrote {len(tasks)} files for {len(items)} partitions in {time.monotonic() - started:.1f} s")
    by_work = grouped(outcomes)
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
            item.manifest.erased = sum(o["erased"] for o in mine)
            item.manifest.dropped = dropped.keys - item.manifest.erased
            item.manifest.outputs = {o["output"]: o["bytes"] for o in mine}
            item.inspections = {o["output"]: o["inspection"] for o in mine}
            item.seconds["write"] += sum(o["seconds"] for o in mine)
            done.append(item)
    return done
