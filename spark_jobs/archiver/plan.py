"""The archiver's durable plan: per Kafka partition the ``[start, end)`` offsets one run carries out, stored in the
topic's lease (``kafkalake.lease``) *before* anything is written.

Only the run holding the topic's lease stores, carries out and finishes plans; a run that takes the lease over
from a holder that stopped renewing it redoes the stored plan. The lease also records the offsets each finished
plan reached (``committed``), written with the same conditional write that clears the plan: new plans start from
the higher of that and the Kafka group's committed offset, so a commit from a run that lost the lease (and
stalled past it) can never make a later run archive the same offsets again under other object keys.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kafkalake.layout import plan_id
from kafkalake.lease import Lease


class RetentionLoss(RuntimeError):
    """Committed offsets fell out of Kafka's retention: records were lost before they were archived."""


@dataclass(frozen=True)
class Plan:
    kafka_topic: str
    created_at: str
    """ISO time fixed with the plan: the 'now' of the time bounds, so a redo decides exactly the same."""
    ranges: dict[int, tuple[int, int]]
    """Kafka partition → [start, end) offsets."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ranges": {str(p): list(r) for p, r in self.ranges.items()}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Plan:
        return cls(raw["kafka_topic"], raw["created_at"], {int(p): (r[0], r[1]) for p, r in raw["ranges"].items()})

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    @property
    def plan_id(self) -> str:
        """``kafkalake.layout.plan_id``: what names its receipt, its Iceberg commit and its erasure request."""
        return plan_id(self.created_at, self.ranges)


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


def resume_from(kafka: dict[int, int | None], finished: dict[int, int]) -> dict[int, int | None]:
    """Per partition, the higher of the group's committed offset and the end the lease records for it (None when
    neither has one)."""
    return {p: max((o for o in (c, finished.get(p)) if o is not None), default=None) for p, c in kafka.items()}


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


def stored_plan(work: dict[str, Any] | None) -> Plan | None:
    """The plan a lease's work holds, None when none."""
    plan = _work(work).get("plan")
    return None if plan is None else Plan.from_dict(plan)


def finished(work: dict[str, Any] | None) -> dict[int, int]:
    """Per Kafka partition, the end of the last finished plan a lease's work records."""
    return {int(p): int(end) for p, end in _work(work).get("committed", {}).items()}


def plan_work(plan: Plan | None, reached: dict[int, int]) -> dict[str, Any]:
    """A lease's work: ``plan`` to carry out (None once cleared) and the offsets finished plans ``reached``."""
    return {
        "plan": None if plan is None else plan.to_dict(),
        "committed": {str(p): e for p, e in sorted(reached.items())},
    }


def _work(work: dict[str, Any] | None) -> dict[str, Any]:
    work = work or {}
    return {"plan": work, "committed": {}} if "kafka_topic" in work else work  # a plan stored before leases


@dataclass(frozen=True)
class PlanLease:
    """A topic's lease read as the archiver's: the stored plan and the offsets finished plans reached."""

    lease: Lease

    def stored_plan(self) -> Plan | None:
        return stored_plan(self.lease.work)

    def finished(self) -> dict[int, int]:
        """Per Kafka partition, the end of the last finished plan."""
        return finished(self.lease.work)

    def store(self, plan: Plan) -> None:
        """Store ``plan`` before any of it is written (``LeaseLost`` if another run took the topic over)."""
        self.lease.update(plan_work(plan, self.finished()))

    def finish(self, plan: Plan, *, release: bool = False) -> None:
        """Clear the carried-out plan and record the offsets it reached, never moving one backwards; with ``release``
        (the run's last plan of the topic), the same write releases the lease."""
        reached = self.finished()
        for partition, (_, end) in plan.ranges.items():
            reached[partition] = max(end, reached.get(partition, end))
        self.lease.update(plan_work(None, reached), release=release)
