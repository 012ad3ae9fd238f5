"""A unit of work's input files as the bins need them (``spark_jobs.compaction.binning``): each file's range of
(Kafka partition, offset) keys, and its size in stored data bytes rather than file bytes (every small file carries
its own footer and dictionaries, which the output does not repeat)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow.parquet as pq

from kafkalake.footer import read_footer
from kafkalake.layout import LayoutError, parse_data_key
from spark_jobs.compaction.binning import UNBOUNDED, InputFile, Key
from spark_jobs.compaction.manifest import Manifest
from spark_jobs.compaction.merging import KEY_COLUMNS

FOOTER_SAMPLE = 8
"""Input footers read per partition to estimate the output's size (stored bytes of data per file byte)."""


def input_files(s3: Any, bucket: str, manifest: Manifest) -> list[InputFile]:
    """Each input's key range: from its name (raw files), the earlier manifest (compacted files) or its footer; and
    its size scaled by the stored-data share of a sample of footers."""
    ranges = manifest.output_ranges
    bounds: dict[str, tuple[Key, Key]] = {}
    for key in manifest.inputs:
        try:
            parsed = parse_data_key(key)
            bounds[key] = ((parsed.kafka_partition, parsed.first_offset), (parsed.kafka_partition, parsed.last_offset))
        except LayoutError:
            if key in ranges:
                spans = ranges[key]  # [kafka partition, first, last(, rows)] each
                bounds[key] = (min((r[0], r[1]) for r in spans), max((r[0], r[2]) for r in spans))
    sample = sorted(manifest.inputs)[:: max(1, len(manifest.inputs) // FOOTER_SAMPLE)][:FOOTER_SAMPLE]
    unknown = [k for k in manifest.inputs if k not in bounds]
    with ThreadPoolExecutor(max_workers=16) as pool:
        read = pool.map(lambda key: read_footer(s3, bucket, key), sample + unknown)
        footers = dict(zip(sample + unknown, read, strict=True))
    for key in unknown:
        bounds[key] = _footer_bounds(footers[key])
    stored = sum(_stored_bytes(footers[k]) for k in sample)
    share = stored / sum(manifest.inputs[k] for k in sample) if stored else 1.0
    return [InputFile(k, max(1, int(size * share)), *bounds[k]) for k, size in manifest.inputs.items()]


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
