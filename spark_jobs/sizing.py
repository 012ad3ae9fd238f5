"""How many files a compaction writes: the estimate before the write, and the re-pack decision after it."""

from __future__ import annotations

import math
from collections.abc import Sequence

REPACK_TOLERANCE = 0.25


def estimated_file_count(input_bytes: int, target: int) -> int:
    """⌈input bytes / target⌉: input bytes can overstate the output (every small file carries its own footer and
    dictionaries), so the result is measured afterwards."""
    return max(1, math.ceil(input_bytes / target))


def repacked_file_count(sizes: Sequence[int], target: int, tolerance: float = REPACK_TOLERANCE) -> int | None:
    """None when the files' average size is within ``tolerance`` of ``target`` (or a single file is small);
    otherwise the file count that brings the measured total closest to the target size. The average, not each
    file: range partitioning by sampled offsets leaves a few percent of skew that another write would not fix."""
    wanted = max(1, round(sum(sizes) / target))
    if len(sizes) == wanted == 1 or abs(sum(sizes) / len(sizes) - target) <= tolerance * target:
        return None
    return wanted if wanted != len(sizes) else None
