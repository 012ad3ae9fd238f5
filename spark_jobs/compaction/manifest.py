"""The per-partition commit record of a rewrite, at ``TablePrefix.compaction_manifest_key``
(``state/<topic path>/compaction/<partition>/manifest.json``, beside the archiver's receipts; ``kafkalake.layout``
decides both).

planned   inputs listed once (the current compacted files plus raw files no earlier run took)
written   merged files in ``TablePrefix.compaction_output_prefix`` (``compacted/<topic path>/<partition>/run=<id>/``,
          never inside a raw directory), and
          the digest of the input keys taken while writing them
verified  the run directory holds only those files, and their key columns match the digest, no duplicates
swapped   the Glue partition points at the run's directory (one UpdatePartition: readers switch at once)
cleaned   inputs deleted, but only once the grace period after the swap has passed
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from kafkalake.aws import read_json


class ManifestState(StrEnum):
    PLANNED = "planned"
    WRITTEN = "written"
    VERIFIED = "verified"
    SWAPPED = "swapped"
    CLEANED = "cleaned"


DONE_STATES = (ManifestState.SWAPPED, ManifestState.CLEANED)
"""States in which the partition's Glue location is the run's output: nothing left to carry forward."""


@dataclass
class Manifest:
    partition: list[str]
    run_id: str
    inputs: dict[str, int]
    """Input key → size in bytes."""
    output_prefix: str
    state: ManifestState = ManifestState.PLANNED
    outputs: dict[str, int] = field(default_factory=dict)
    output_ranges: dict[str, list[list[int]]] = field(default_factory=dict)
    """Output key → [[kafka partition, first offset, last offset, rows], ...] (manifests before the offset audit
    lack the rows)."""
    rows: int = 0
    expected: dict[str, list[int]] = field(default_factory=dict)
    """The digest (``spark_jobs.compaction.digest``) of the distinct input keys, taken while writing: what verification
    expects of the run directory, also after a crash between the write and the verification."""
    dropped: int = 0
    """Input rows whose (Kafka partition, offset) another input already held."""
    erase: list[list[int]] = field(default_factory=list)
    """[Kafka partition, offset] keys the rewrite leaves out on purpose: an erasure's rows (``spark_jobs.erasure``).
    Verification holds the output to the inputs minus them, as for any dropped key."""
    erased: int = 0
    """Input rows left out because ``erase`` names them."""
    superseded: dict[str, int] = field(default_factory=dict)
    """Inputs of earlier runs on this partition whose deletion is still due (their grace period restarts)."""
    previous_location: str | None = None
    swapped_at: str | None = None
    history: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        return cls(**{**raw, "state": ManifestState(raw["state"])})

    def advance(self, state: ManifestState, now: datetime) -> None:
        self.state = state
        self.history.append(f"{now.isoformat()} {state}")

    def due_for_deletion(self) -> dict[str, int]:
        """Inputs of this run and of earlier ones that are still to be deleted."""
        return {**self.superseded, **self.inputs}


@dataclass(frozen=True)
class ManifestStore:
    s3: Any
    bucket: str

    def load(self, key: str) -> Manifest | None:
        found = read_json(self.s3, self.bucket, key)
        return Manifest.from_dict(found) if found is not None else None

    def save(self, key: str, manifest: Manifest) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=manifest.to_json().encode())
