"""The S3 lease that fences overlapping runs (in-process moto: conditional writes as S3 answers them, on a clock the
test moves: S3's, which stamps ``Last-Modified`` and dates its answers)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from kafkalake import lease as leases
from kafkalake.lease import Held, Lease, LeaseLost, quiet_spell

KEY = "state/staging/acme/payments/orders/lease.json"
TTL = timedelta(minutes=10)
SECOND = timedelta(seconds=1)


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 11, 23, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
def clock(s3: Any, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """S3's clock: what moto stamps objects with (``Last-Modified``) and the ``Date`` of its answers, which moto in
    process leaves out (S3 and moto's server always send it)."""
    clock = Clock()
    monkeypatch.setattr("moto.s3.models.utcnow", lambda: clock.at.replace(tzinfo=None))

    def dated(response_dict: dict[str, Any], **_: Any) -> None:
        response_dict["headers"]["date"] = format_datetime(clock.at, usegmt=True)

    s3.meta.events.register("before-parse.s3.GetObject", dated)
    return clock


class Ticks:
    """A holder's monotonic clock, in seconds."""

    def __init__(self) -> None:
        self.at = 1000.0

    def __call__(self) -> float:
        return self.at


def stored(s3: Any) -> dict[str, Any]:
    return json.loads(s3.get_object(Bucket="lake", Key=KEY)["Body"].read())  # type: ignore[no-any-return]


def test_a_second_run_is_refused_while_the_holder_renews(s3: Any, clock: Clock) -> None:
    first = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    clock.at += TTL / 2
    first.update({"plan": 1})
    clock.at += TTL / 2
    with pytest.raises(Held, match=r"held by run run-a since 2026-11-23T12:00:00\+00:00"):
        Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    assert stored(s3)["run_id"] == "run-a" and stored(s3)["work"] == {"plan": 1}


def test_a_stale_lease_is_taken_over_with_its_work_and_the_old_holder_is_fenced(s3: Any, clock: Clock) -> None:
    old = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    old.update({"plan": "P1"})
    clock.at += TTL + SECOND
    new = Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    assert new.work == {"plan": "P1"}, "the next holder redoes the stored work"
    assert new.document.token == old.document.token + 1
    with pytest.raises(LeaseLost, match=r"run run-a lost .* to run run-b"):
        old.update({"plan": "P2"})
    with pytest.raises(LeaseLost):
        old.release()
    new.update(None)
    assert stored(s3)["run_id"] == "run-b" and stored(s3)["work"] is None


def test_staleness_is_read_on_s3s_clock_to_its_whole_second(s3: Any) -> None:
    """Last-Modified and Date are whole seconds: a lease ``ttl`` apart may have been written up to a second later
    than it says, so it is stale one second after that, and at most ``STALE_WITHIN`` after ``ttl`` truly passed."""
    written = datetime(2026, 11, 23, 12, tzinfo=UTC)
    held = leases.LeaseDocument("run-a", "", "", 1)

    def stale(document: leases.LeaseDocument, read: datetime) -> bool:
        return leases.Stored(document, '"etag"', written, read).stale(TTL)

    assert not stale(held, written + TTL)
    assert stale(held, written + TTL + leases.RESOLUTION)
    assert leases.RESOLUTION < leases.STALE_WITHIN
    assert stale(leases.LeaseDocument(None, "", "", 1), written), "a released lease is free at once"


def test_the_holders_and_the_takers_clocks_an_hour_apart_change_nothing(s3: Any, clock: Clock) -> None:
    """Only S3's clock counts: a taker an hour ahead of a live holder does not take its lease, and a taker an hour
    behind takes the lease of a holder that stopped renewing."""
    behind, ahead = (lambda: clock.at - timedelta(hours=1)), (lambda: clock.at + timedelta(hours=1))
    holder = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=behind)
    clock.at += TTL / 2
    holder.renew()
    clock.at += TTL / 2
    with pytest.raises(Held, match="run-a"):
        Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=ahead)

    clock.at += TTL + SECOND  # the holder stopped renewing
    early = Lease.acquire(s3, "lake", KEY, "run-c", ttl=TTL, now=ahead)  # ... and so does this one
    clock.at += TTL + SECOND
    late = Lease.acquire(s3, "lake", KEY, "run-d", ttl=TTL, now=behind)
    assert late.document.token == early.document.token + 1 and stored(s3)["run_id"] == "run-d"


def test_a_holder_that_could_not_renew_before_its_expiry_commits_nothing_more(s3: Any, clock: Clock) -> None:
    """Renewals failed (S3 unreachable) until the holder's own expiry, counted on its monotonic clock from when it
    sent its last write: no run took the lease yet, but one may at any moment, so the holder's steps stop."""
    ticks = Ticks()
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock, monotonic=ticks)
    ticks.at += TTL.total_seconds() / 2
    lease.update({"plan": 1})
    ticks.at += TTL.total_seconds() - 1
    lease.renew()  # in time: the expiry moves on
    ticks.at += TTL.total_seconds()
    with pytest.raises(LeaseLost, match=r"run run-a lost .*: it could not renew it within 600 s"):
        lease.update({"plan": 2})
    with pytest.raises(LeaseLost):
        lease.release()
    assert stored(s3)["run_id"] == "run-a" and stored(s3)["work"] == {"plan": 1}


def test_a_released_lease_is_taken_at_once_and_two_takers_cannot_both_win(s3: Any, clock: Clock) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    lease.release()
    taker = Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)
    with pytest.raises(Held, match="run-b"):
        Lease.acquire(s3, "lake", KEY, "run-c", ttl=TTL, now=clock)
    assert taker.document.token == 2


def test_a_plan_stored_before_leases_existed_is_adopted_for_a_redo(s3: Any, clock: Clock) -> None:
    legacy = {"kafka_topic": "t", "created_at": "2026-11-23T11:00:00+00:00", "ranges": {"0": [0, 10]}}
    s3.put_object(Bucket="lake", Key=KEY, Body=json.dumps(legacy).encode())
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    assert lease.work == legacy and lease.document.token == 1


def test_each_durable_step_is_one_conditional_write(s3: Any, clock: Clock) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    lease.update({"plan": 1})
    lease.update(None)
    lease.release()
    assert lease.requests == 3


def test_a_last_step_releases_the_lease_in_its_own_write(s3: Any, clock: Clock) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock)
    lease.update({"plan": 1})
    lease.update({"plan": None}, release=True)
    lease.release()  # already released: no request
    lease.renew()  # nothing to tell: no request
    assert lease.requests == 2 and lease.released
    assert stored(s3)["run_id"] is None and stored(s3)["work"] == {"plan": None}
    taker = Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock)  # at once, as after release()
    assert taker.document.token == 2
    with pytest.raises(LeaseLost, match="released the lease"):
        lease.update({"plan": 2})


def test_a_renewal_is_made_only_after_a_quiet_spell(s3: Any, clock: Clock) -> None:
    """A durable step tells other runs the holder is alive: the renewal thread writes only for a lease nobody wrote
    for ``quiet_for``, and the holder's expiry counts from its last write either way."""
    ticks = Ticks()
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock, monotonic=ticks)
    ticks.at += 100
    lease.update({"plan": 1})
    ticks.at += 150
    lease.renew(quiet_for=timedelta(seconds=200))
    assert lease.requests == 1 and lease.written == 1100
    ticks.at += 50
    lease.renew(quiet_for=timedelta(seconds=200))
    assert lease.requests == 2 and lease.written == 1300 and lease.expires == 1300 + TTL.total_seconds()


def test_kept_alive_renews_in_the_background_so_a_long_step_keeps_the_lease(s3: Any, clock: Clock) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=lambda: datetime.now(UTC))
    first = stored(s3)["renewed_at"]
    with lease.kept_alive(every=timedelta(milliseconds=50)):
        deadline = datetime.now(UTC) + timedelta(seconds=5)
        while stored(s3)["renewed_at"] == first and datetime.now(UTC) < deadline:
            pass
    assert stored(s3)["renewed_at"] > first and stored(s3)["run_id"] == "run-a"
    lease.update({"plan": 2})  # the holder's etag followed the renewals


def test_a_renewal_that_fails_for_any_reason_is_tried_again_at_the_next_beat(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The renewal thread lives through a failure that is not S3's (here: an answer without a Date header)."""
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=lambda: datetime.now(UTC))
    first = stored(s3)["renewed_at"]
    renew, calls = Lease.renew, []

    def fails_first(self: Lease, quiet_for: timedelta = timedelta(0)) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("s3://lake/lease.json: the answer has no usable Date header (None)")
        renew(self, quiet_for)

    monkeypatch.setattr(Lease, "renew", fails_first)
    with lease.kept_alive(every=timedelta(milliseconds=50)):
        deadline = datetime.now(UTC) + timedelta(seconds=5)
        while stored(s3)["renewed_at"] == first and datetime.now(UTC) < deadline:
            pass
    assert len(calls) >= 2 and stored(s3)["renewed_at"] > first, "the renewals stopped at the first failure"


class Answers:
    """An S3 client whose next ``put_object`` calls are answered as listed: ``lost`` (the write lands, its answer
    is a 412, as botocore's retry of a write whose first answer was lost gets), ``409`` (refused, in progress)."""

    def __init__(self, s3: Any, *answers: str) -> None:
        self.s3, self.answers, self.puts = s3, list(answers), 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.puts += 1
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer == "409":
            raise ClientError({"Error": {"Code": "ConditionalRequestConflict"}}, "PutObject")
        done = self.s3.put_object(**kwargs)
        if answer == "lost":
            raise ClientError({"Error": {"Code": "PreconditionFailed"}}, "PutObject")
        return done


def test_a_created_object_whose_answer_was_lost_is_recognised_as_ours(s3: Any) -> None:
    assert leases.create_once(Answers(s3, "lost"), "lake", "claim.json", {"partition": "p"})
    assert not leases.create_once(s3, "lake", "claim.json", {"partition": "p"})  # another writer: it holds it


def test_a_create_that_met_a_write_in_progress_is_retried(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases, "BACKOFF", timedelta(0))
    client = Answers(s3, "409")
    assert leases.create_once(client, "lake", "claim.json", {"partition": "p"})
    assert client.puts == 2
    assert json.loads(s3.get_object(Bucket="lake", Key="claim.json")["Body"].read())["partition"] == "p"


def test_kept_alive_leaves_a_released_lease_alone(s3: Any) -> None:
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=lambda: datetime.now(UTC))
    with lease.kept_alive(every=timedelta(milliseconds=20)):
        lease.update(None, release=True)
        released = stored(s3)
        time.sleep(0.2)
    assert stored(s3) == released and released["run_id"] is None and lease.requests == 1


def test_the_write_that_takes_the_lease_stores_the_holders_first_work(s3: Any, clock: Clock) -> None:
    """``work`` sees the stored work once the lease is known takeable, and is asked again when the taking write
    loses a race (here: another run takes the released lease between the read and the write)."""
    Lease.acquire(s3, "lake", KEY, "run-a", ttl=TTL, now=clock).update({"done": 1}, release=True)
    seen: list[Any] = []

    def first_work(stored: Any) -> Any:
        seen.append(stored)
        if len(seen) == 1:
            Lease.acquire(s3, "lake", KEY, "run-b", ttl=TTL, now=clock).update({"done": 2}, release=True)
        return {**stored, "plan": len(seen)}

    lease = Lease.acquire(s3, "lake", KEY, "run-c", ttl=TTL, now=clock, work=first_work)
    assert seen == [{"done": 1}, {"done": 2}]
    assert lease.work == stored(s3)["work"] == {"done": 2, "plan": 2} and lease.requests == 0
    with pytest.raises(Held, match="run-c"):
        Lease.acquire(s3, "lake", KEY, "run-d", ttl=TTL, now=clock, work=first_work)
    assert len(seen) == 2, "work is asked only of a lease that can be taken"


def test_a_lease_written_within_half_its_ttl_costs_no_renewal(s3: Any) -> None:
    """``quiet_spell``: renewed only after half the TTL without a write, so a step that writes within it costs no
    renewal; the checks every sixth of the TTL leave three tries before the holder's expiry."""
    # a TTL of seconds, not of milliseconds: a loaded machine (the suite's two workers) once took longer than a 600 ms
    # TTL to renew, and the lease was lost
    ttl = timedelta(seconds=3)
    assert quiet_spell(ttl) == ttl / 2
    lease = Lease.acquire(s3, "lake", KEY, "run-a", ttl=ttl, now=lambda: datetime.now(UTC))
    with lease.kept_alive(quiet_spell(ttl)):
        time.sleep(1.0)  # two checks (every 500 ms), both within the quiet spell
        assert lease.requests == 0, "renewed before half the TTL passed without a write"
        lease.update({"plan": 1})
        deadline = time.monotonic() + 10
        while lease.requests < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert lease.requests == 2 and stored(s3)["run_id"] == "run-a", "not renewed once the quiet spell passed"
