"""How many files a rewrite writes: the estimate before the write (from the inputs' stored bytes,
``spark_jobs.compaction.inputs``), and the re-pack decision once the written sizes are known."""

from __future__ import annotations

import math
from collections.abc import Sequence

REPACK_TOLERANCE = 0.25


def estimated_file_count(input_bytes: int, target: int) -> int:
    """⌈input bytes / target⌉: an estimate (the output's encoding and compression differ from the inputs'), so
    the written sizes are measured afterwards (``repacked_file_count``)."""
    return max(1, math.ceil(input_bytes / target))


def repacked_file_count(sizes: Sequence[int], target: int, tolerance: float = REPACK_TOLERANCE) -> int | None:
    """None when the files' average size is within ``tolerance`` of ``target`` (or a single file is small);
    otherwise the file count that brings the measured total closest to the target size. The average, not each
    file: bins of whole input files are uneven by up to a file's size, which another write would not fix."""
    wanted = max(1, round(sum(sizes) / target))
    if len(sizes) == wanted == 1 or abs(sum(sizes) / len(sizes) - target) <= tolerance * target:
        return None
    return wanted if wanted != len(sizes) else None
