"""The archiver's durable plan: per Kafka partition the ``[start, end)`` offsets one run carries out.

The plan is stored in S3 *before* anything is written, with a conditional put so concurrent runs share one plan;
a run that finds a plan redoes it, and the plan is deleted only after the offsets are committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

from kafkalake.aws import read_json


class RetentionLoss(RuntimeError):
    """Committed offsets fell out of Kafka's retention: records were lost before they were archived."""


@dataclass(frozen=True)
class Plan:
    kafka_topic: str
    created_at: str
    """ISO time fixed with the plan: the 'now' of the time bounds, so a redo decides exactly the same."""
    ranges: dict[int, tuple[int, int]]
    """Kafka partition → [start, end) offsets."""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ranges": {str(p): list(r) for p, r in self.ranges.items()}})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Plan:
        return cls(raw["kafka_topic"], raw["created_at"], {int(p): (r[0], r[1]) for p, r in raw["ranges"].items()})

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def _starts(
    committed: dict[int, int | None], low: dict[int, int], *, accept_data_loss: bool, topic: str
) -> dict[int, int]:
    """Where each partition resumes: the committed offset, or the earliest retained one for new partitions (and,
    when loss is accepted, for partitions whose committed offset fell out of retention)."""
    starts = {}
    for partition, offset in committed.items():
        if offset is not None and offset < low[partition] and not accept_data_loss:
            raise RetentionLoss(
                f"{topic}[{partition}]: committed offset {offset} is below the earliest retained offset "
                f"{low[partition]}; {low[partition] - offset} records were lost before archiving. Raise the "
                "topic's retention, or set archive.accept_data_loss: true in its catalog file to go on."
            )
        starts[partition] = low[partition] if offset is None or offset < low[partition] else offset
    return starts


def plan_ranges(
    committed: dict[int, int | None],
    low: dict[int, int],
    high: dict[int, int],
    *,
    max_records: int,
    accept_data_loss: bool,
    topic: str,
) -> dict[int, tuple[int, int]]:
    """Per partition: from the committed offset (earliest for new partitions) to the high watermark, the
    record budget shared fairly across partitions. Offsets out of retention fail unless loss is accepted."""
    starts = _starts(committed, low, accept_data_loss=accept_data_loss, topic=topic)
    backlog = {p: max(0, high[p] - s) for p, s in starts.items()}
    budget, grants = max_records, dict.fromkeys(starts, 0)
    pending = sorted(p for p, n in backlog.items() if n)
    while budget > 0 and pending:
        share = max(1, budget // len(pending))
        for p in list(pending):
            grant = min(share, backlog[p] - grants[p], budget)
            grants[p] += grant
            budget -= grant
            if grants[p] == backlog[p]:
                pending.remove(p)
            if budget == 0:
                break
    return {p: (starts[p], starts[p] + grants[p]) for p in sorted(starts) if grants[p]}


@dataclass(frozen=True)
class PlanStore:
    """One topic's plan object in S3."""

    s3: Any
    bucket: str
    key: str

    def load_or_create(self, make: Callable[[], Plan]) -> tuple[Plan, bool]:
        """The stored plan (redone after a crash), or a new one stored with If-None-Match so that two runs
        started at once end up carrying out the same plan. Returns (plan, was it already stored)."""
        for _ in range(3):
            stored = read_json(self.s3, self.bucket, self.key)
            if stored is not None:
                return Plan.from_dict(stored), True
            plan = make()
            if not plan.ranges:  # nothing to do: nothing to store
                return plan, False
            try:
                self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=plan.to_json().encode(), IfNoneMatch="*")
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise
                continue
            return plan, False
        raise RuntimeError(f"could not read or create the plan s3://{self.bucket}/{self.key}")

    def delete(self) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self.key)
