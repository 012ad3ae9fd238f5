"""The S3 lease that fences overlapping runs (in-process moto: conditional writes as S3 answers them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafkalake.lease import Held, Lease, LeaseLost

KEY = "state/staging/acme/payments/orders/lease.json"
TTL = timedelta(minutes=10)


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 11, 23, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


def stored(s3: Any) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket="lake", Key=KEY)["Body"].read())  # type: ignore[no-any-return]


def test_a_second_run_is_refused_while_the_holder_renews(s3: Any) -> None:
    clock = Clock()
    first = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    clock.at += TTL / 2
    first.update({"plan": 1})
    clock.at += TTL / 2
    with pytest.raises(Held, match=r"held by run run-a since 2026-11-23T12:00:00\+00:00"):
        Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    assert stored(s3)["run_id"] == "run-a" and stored(s3)["work"] == {"plan": 1}


def test_a_stale_lease_is_taken_over_with_its_work_and_the_old_holder_is_fenced(s3: Any) -> None:
    clock = Clock()
    old = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    old.update({"plan": "P1"})
    clock.at += TTL
    new = Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    assert new.work == {"plan": "P1"}, "the next holder redoes the stored work"
    assert new.document.token == old.document.token + 1
    with pytest.raises(LeaseLost, match=r"run run-a lost .* to run run-b"):
        old.update({"plan": "P2"})
    with pytest.raises(LeaseLost):
        old.release()
    new.update(None)
    assert stored(s3)["run_id"] == "run-b" and stored(s3)["work"] is None


def test_a_released_lease_is_taken_at_once_and_two_takers_cannot_both_win(s3: Any) -> None:
    clock = Clock()
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    lease.release()
    taker = Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    with pytest.raises(Held, match="run-b"):
        Lease.acquire(s3, "lake", KEY, "run-c", ttl=TTL, now=clock)
    assert taker.document.token == 2


def test_a_plan_stored_before_leases_existed_is_adopted_for_a_redo(s3: Any) -> None:
    legacy = {"kafka_topic": "t", "created_at": "2026-11-23T11:00:00+00:00", "ranges": {"0": [0, 10]}}
    s3.put_object(Bucket="lake", Key=KEY, Body=json.dumps(legacy).encode())
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=Clock())
    assert lease.work == legacy and lease.document.token == 1


def test_each_durable_step_is_one_conditional_write(s3: Any) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=Clock())
    lease.update({"plan": 1})
    lease.update(None)
    lease.release()
    assert lease.requests == 3


def test_kept_alive_renews_in_the_background_so_a_long_step_keeps_the_lease(s3: Any) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=lambda: datetime.now(UTC))
    first = stored(s3)["renewed_at"]
    with lease.kept_alive(every=timedelta(milliseconds=50)):
        deadline = datetime.now(UTC) + timedelta(seconds=5)
        while stored(s3)["renewed_at"] == first and datetime.now(UTC) < deadline:
            pass
    assert stored(s3)["renewed_at"] > first and stored(s3)["run_id"] == "run-a"
    lease.update({"plan": 2})  # the holder's etag followed the renewals
