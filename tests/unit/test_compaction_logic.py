"""The compactor's pure parts: key digests, order checks, de-duplication masks and bin planning."""

from __future__ import annotations

import numpy as np

from spark_jobs.compaction.binning import UNBOUNDED, InputFile, plan_bins
from spark_jobs.compaction.digest import KeyDigest, first_disorder, repeats


def digest(pairs: list[tuple[int, int]]) -> KeyDigest:
    partitions = np.array([p for p, _ in pairs], dtype=np.int32)
    offsets = np.array([o for _, o in pairs], dtype=np.int64)
    return KeyDigest.of(partitions, offsets)


def test_digest_is_order_independent_and_additive() -> None:
    keys = [(p, o) for p in range(3) for o in range(1000)]
    shuffled = list(keys)
    np.random.default_rng(1).shuffle(shuffled)
    whole = digest(keys)
    assert whole == digest(shuffled)
    assert digest(keys[:1500]) + digest(keys[1500:]) == whole
    assert whole - digest(keys[1500:]) == digest(keys[:1500])
    assert KeyDigest.from_json(whole.to_json()) == whole
    assert whole.keys == 3000


def test_digest_differences_name_missing_duplicate_and_foreign_keys() -> None:
    expected = digest([(0, o) for o in range(10)] + [(1, o) for o in range(10)])
    assert expected.differences(expected) == []
    missing = digest([(0, o) for o in range(9)] + [(1, o) for o in range(10)])
    assert missing.differences(expected) == ["Kafka partition 0: 9 rows for 10 inputs (missing)"]
    doubled = digest([(0, o) for o in range(10)] + [(1, o) for o in range(10)] + [(1, 3)])
    assert doubled.differences(expected) == ["Kafka partition 1: 11 rows for 10 inputs (duplicates)"]
    swapped = digest([(0, o) for o in range(9)] + [(0, 99)] + [(1, o) for o in range(10)])
    assert swapped.differences(expected) == ["Kafka partition 0: 10 rows, but not the input keys"]
    elsewhere = digest([(0, o) for o in range(10)] + [(2, o) for o in range(10)])
    assert "Kafka partition 2: 10 rows for 0 inputs (duplicates)" in elsewhere.differences(expected)


def test_first_disorder_and_repeats() -> None:
    partitions = np.array([0, 0, 0, 1, 1, 1])
    assert first_disorder(partitions, np.array([0, 1, 2, 0, 1, 2])) is None
    assert first_disorder(partitions, np.array([0, 1, 1, 0, 1, 2])) == 2  # a repeated key
    assert first_disorder(np.array([1, 0]), np.array([0, 5])) == 1  # partitions out of order
    mask = repeats(np.array([0, 0, 0, 1, 1]), np.array([1, 1, 2, 2, 2]))
    assert mask.tolist() == [False, True, False, False, True]


def raw(key: str, partition: int, first: int, last: int, size: int = 100) -> InputFile:
    return InputFile(key, size, (partition, first), (partition, last))


def test_bins_are_consecutive_key_ranges_of_about_equal_size() -> None:
    files = [raw(f"f{p}-{i:03d}", p, i * 10, i * 10 + 9) for p in range(2) for i in range(30)]
    bins = plan_bins(list(reversed(files)), 3)
    assert [len(b.inputs) for b in bins] == [20, 20, 20]
    assert [k for b in bins for k in b.inputs] == [f.key for f in files]  # key order, every file once
    assert not any(b.overlapping for b in bins)


def test_overlapping_files_share_a_bin_which_is_sorted() -> None:
    files = [raw(f"a{i}", 0, i * 10, i * 10 + 9) for i in range(10)]
    compacted = InputFile("compacted", 500, (0, 0), (1, 99))  # an earlier output spanning two Kafka partitions
    late = raw("late", 0, 35, 44)
    bins = plan_bins([*files, compacted, late], 2)
    assert len(bins) == 1 and bins[0].overlapping  # the compacted range covers everything: one sorted bin
    separate = plan_bins([*files, raw("b", 1, 0, 9, size=1000)], 2)
    assert [b.inputs for b in separate] == [tuple(f.key for f in files), ("b",)]
    assert not any(b.overlapping for b in separate)


def test_a_file_of_unknown_range_overlaps_everything() -> None:
    files = [raw(f"a{i}", 0, i * 10, i * 10 + 9) for i in range(4)]
    [only] = plan_bins([*files, InputFile("hand-copied", 100, *UNBOUNDED)], 4)
    assert only.overlapping and len(only.inputs) == 5


def test_touching_ranges_overlap_but_adjacent_ones_do_not() -> None:
    assert plan_bins([raw("a", 0, 0, 9), raw("b", 0, 9, 19)], 2)[0].overlapping  # offset 9 is in both
    assert len(plan_bins([raw("a", 0, 0, 9), raw("b", 0, 10, 19)], 2)) == 2
