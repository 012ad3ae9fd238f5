"""Which input files make which output file: whole files, in key order, in bins of about equal size.

Each input covers a range of (Kafka partition, offset) keys: a raw file's name says it, an earlier compaction's
manifest records it for its outputs, other files get bounds from their footer statistics. Files whose ranges
overlap (a late file inside a compacted range, a file archived twice) go into one bin, which is then sorted and
de-duplicated; every other bin is the concatenation of already ordered files, streamed without a sort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Key = tuple[int, int]
"""(Kafka partition, offset)."""
UNBOUNDED: tuple[Key, Key] = ((0, 0), (2**31, 2**63))
"""The bounds of a file whose keys are unknown: it overlaps every other file."""


@dataclass(frozen=True)
class InputFile:
    key: str
    size: int
    low: Key
    high: Key


@dataclass(frozen=True)
class Bin:
    """The inputs of one output file, in key order."""

    inputs: tuple[str, ...]
    size: int
    overlapping: bool
    """Some inputs share keys: the bin is sorted and de-duplicated rather than streamed."""


def _clusters(files: Sequence[InputFile]) -> list[list[InputFile]]:
    """Maximal runs of files, in key order, whose ranges overlap (a key shared counts)."""
    clusters: list[list[InputFile]] = []
    reach: Key | None = None
    for file in sorted(files, key=lambda f: (f.low, f.high, f.key)):
        if reach is not None and file.low <= reach:
            clusters[-1].append(file)
            reach = max(reach, file.high)
        else:
            clusters.append([file])
            reach = file.high
    return clusters


def plan_bins(files: Sequence[InputFile], wanted: int) -> list[Bin]:
    """At most ``wanted`` bins of consecutive key ranges, each cut where the running size is nearest to an
    equal share; overlapping files always share a bin."""
    total = sum(f.size for f in files)
    bins: list[Bin] = []
    current: list[list[InputFile]] = []
    done = 0
    for cluster in _clusters(files):
        size = sum(f.size for f in cluster)
        boundary = total * (len(bins) + 1) / max(wanted, 1)
        if current and len(bins) < wanted - 1 and done + size - boundary > boundary - done:
            bins.append(_bin(current))
            current = []
        current.append(cluster)
        done += size
    if current:
        bins.append(_bin(current))
    return bins


def _bin(clusters: list[list[InputFile]]) -> Bin:
    return Bin(
        inputs=tuple(f.key for cluster in clusters for f in cluster),
        size=sum(f.size for cluster in clusters for f in cluster),
        overlapping=any(len(cluster) > 1 for cluster in clusters),
    )
