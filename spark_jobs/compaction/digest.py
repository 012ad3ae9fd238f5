"""Order-independent fingerprints of (Kafka partition, offset) keys, for the compactor's verification.

Per Kafka partition, a digest holds the number of keys and the wrapping 64-bit sum of a strong mix of each key.
Sums are order-independent, so a digest taken while writing (inputs streamed in any order) can be compared with
one taken from the outputs' key columns afterwards: a missing, extra or repeated key changes the count and, with
overwhelming probability, the sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

_WORD = 1 << 64


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer over unsigned 64-bit words (array arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


@dataclass(frozen=True)
class KeyDigest:
    """Kafka partition → (keys, fingerprint)."""

    parts: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, partitions: np.ndarray, offsets: np.ndarray) -> KeyDigest:
        hashes = _mix(_mix(partitions.astype(np.uint64)) ^ offsets.astype(np.uint64))
        parts = {}
        for partition in np.unique(partitions):
            mine = hashes[partitions == partition]
            parts[int(partition)] = (len(mine), int(mine.sum(dtype=np.uint64)))
        return cls(parts)

    def __add__(self, other: KeyDigest) -> KeyDigest:
        return self._combine(other, 1)

    def __sub__(self, other: KeyDigest) -> KeyDigest:
        return self._combine(other, -1)

    def _combine(self, other: KeyDigest, sign: int) -> KeyDigest:
        parts = dict(self.parts)
        for partition, (keys, fingerprint) in other.parts.items():
            mine_keys, mine_fingerprint = parts.get(partition, (0, 0))
            parts[partition] = (mine_keys + sign * keys, (mine_fingerprint + sign * fingerprint) % _WORD)
        return KeyDigest({p: value for p, value in parts.items() if value != (0, 0)})

    @property
    def keys(self) -> int:
        return sum(keys for keys, _ in self.parts.values())

    def to_json(self) -> dict[str, list[int]]:
        return {str(p): [keys, fingerprint] for p, (keys, fingerprint) in sorted(self.parts.items())}

    @classmethod
    def from_json(cls, raw: Mapping[str, list[int]]) -> KeyDigest:
        return cls({int(p): (int(keys), int(fingerprint)) for p, (keys, fingerprint) in raw.items()})

    def differences(self, expected: KeyDigest) -> list[str]:
        """What differs from ``expected``, per Kafka partition, in words."""
        found = []
        for partition in sorted(set(self.parts) | set(expected.parts)):
            keys, fingerprint = self.parts.get(partition, (0, 0))
            wanted_keys, wanted_fingerprint = expected.parts.get(partition, (0, 0))
            if keys > wanted_keys:
                found.append(f"Kafka partition {partition}: {keys} rows for {wanted_keys} inputs (duplicates)")
            elif keys < wanted_keys:
                found.append(f"Kafka partition {partition}: {keys} rows for {wanted_keys} inputs (missing)")
            elif fingerprint != wanted_fingerprint:
                found.append(f"Kafka partition {partition}: {keys} rows, but not the input keys")
        return found


def first_disorder(partitions: np.ndarray, offsets: np.ndarray) -> int | None:
    """The first row whose (partition, offset) is not strictly greater than the row before it, or None."""
    if len(partitions) < 2:
        return None
    later_p, earlier_p = partitions[1:], partitions[:-1]
    increasing = (later_p > earlier_p) | ((later_p == earlier_p) & (offsets[1:] > offsets[:-1]))
    bad = np.flatnonzero(~increasing)
    return int(bad[0]) + 1 if len(bad) else None


def repeats(partitions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Mask of the rows whose key equals the row before (rows sorted by key): all but the first of each key."""
    mask = np.zeros(len(partitions), dtype=bool)
    if len(partitions) > 1:
        mask[1:] = (partitions[1:] == partitions[:-1]) & (offsets[1:] == offsets[:-1])
    return mask
