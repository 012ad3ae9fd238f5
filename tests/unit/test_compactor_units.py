"""The compactor's sizing rule, without Spark."""

from __future__ import annotations

import pytest

from spark_jobs.compaction.sizing import repacked_file_count

MB = 1024 * 1024


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([157 * MB, 157 * MB], None),  # 2.45 targets in 2 files: +23%, within the tolerance
        ([105 * MB, 105 * MB, 104 * MB], None),  # the same bytes in 3 files: -18%, within the tolerance
        ([95 * MB, 102 * MB, 103 * MB], None),  # sampling skew: one file at -26%, the average at -22%
        ([37 * MB] * 4, 1),  # small data compresses better merged: 4 files of 37 MB become 1
        ([40 * MB] * 10, 3),  # 400 MB in files far below the target: re-pack into round(400/128) = 3
        ([300 * MB], 2),  # one file far above the target is split
        ([20 * MB], None),  # a partition smaller than the target stays one file
        ([200 * MB, 60 * MB], None),  # skewed, but 2 is already the closest count: re-packing cannot help
        ([90 * MB] * 3, 2),  # the average misses by 30%: 270 MB fit 2 files better
    ],
)
def test_repacks_only_when_files_miss_the_target(sizes: list[int], expected: int | None) -> None:
    assert repacked_file_count(sizes, 128 * MB) == expected
