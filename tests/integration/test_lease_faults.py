"""The lease against what S3's conditional writes do that the local endpoint never shows by itself, through the fault
proxy (``tests.faults``) in front of the local stack's S3: a ``409 ConditionalRequestConflict``, a write that landed
but whose answer was lost (botocore retries it and S3 refuses the retry with ``412``), renewals that time out."""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from kafkalake.aws import RETRIES, RetryCount, make_client, read_json
from kafkalake.endpoints import Endpoints
from kafkalake.lease import Held, Lease, LeaseLost, quiet_spell
from kafkalake_dev.local.sandbox import with_bucket
from tests.faults import CONFLICT, INTERNAL_ERROR, NO_ANSWER, FaultProxy, aws_proxy

pytestmark = pytest.mark.stack
TTL = timedelta(seconds=30)


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, "kafkalake-lease-fault-tests")


@pytest.fixture
def proxy(endpoints: Endpoints) -> Iterator[FaultProxy]:
    with aws_proxy(endpoints) as proxy:
        yield proxy


@pytest.fixture
def key() -> str:
    return f"state/lease-faults/{uuid.uuid4().hex}/lease.json"


def through(endpoints: Endpoints, proxy: FaultProxy, *, attempts: int | None = None, read_timeout: float = 30) -> Any:
    """An S3 client configured as the jobs' are (``kafkalake.aws.RETRIES``), through the proxy; a test of timeouts
    makes fewer ``attempts`` (the first and the retries) that each wait less."""
    fewer = {"retries": {"mode": "adaptive", "total_max_attempts": attempts}} if attempts else {}
    config = RETRIES.merge(Config(read_timeout=read_timeout, **fewer))
    return boto3.client("s3", config=config, region_name=endpoints.region, endpoint_url=proxy.url)


def lease_path(endpoints: Endpoints, key: str) -> str:
    return rf"^/{endpoints.bucket}/{re.escape(key)}"


def stored(endpoints: Endpoints, key: str) -> dict[str, Any]:
    document = read_json(make_client(endpoints, "s3"), endpoints.bucket, key)
    assert isinstance(document, dict)
    return document


def now() -> datetime:
    return datetime.now(UTC)


def test_a_409_is_retried_after_re_reading_the_etag(endpoints: Endpoints, proxy: FaultProxy, key: str) -> None:
    s3 = through(endpoints, proxy)
    lease = Lease.acquire(s3, endpoints.bucket, key, "run-a", ttl=TTL, now=now)
    proxy.inject("PUT", lease_path(endpoints, key), CONFLICT, times=1)

    lease.update({"plan": 1})

    assert proxy.injected == Counter({"409 ConditionalRequestConflict": 1})
    assert stored(endpoints, key)["work"] == {"plan": 1} and stored(endpoints, key)["run_id"] == "run-a"
    with pytest.raises(Held, match="held by run run-a"):
        Lease.acquire(s3, endpoints.bucket, key, "run-b", ttl=TTL, now=now)


def test_a_write_that_landed_but_whose_answer_was_lost_is_the_holders(
    endpoints: Endpoints, proxy: FaultProxy, key: str
) -> None:
    """The proxy passes a PUT on to S3 and closes the connection instead of answering; botocore retries it and S3
    refuses the retry (412: the object exists, or its ETag moved on) because the first attempt landed."""
    s3 = through(endpoints, proxy)
    retries = RetryCount(s3)

    def lose_an_answer() -> None:
        proxy.inject("PUT", lease_path(endpoints, key), NO_ANSWER, times=1, forward=True)

    lose_an_answer()
    lease = Lease.acquire(s3, endpoints.bucket, key, "run-a", ttl=TTL, now=now)  # If-None-Match: *
    assert stored(endpoints, key)["token"] == 1, "taken once, not taken over from itself"
    lose_an_answer()
    lease.update({"plan": 1})  # If-Match
    lose_an_answer()
    lease.release()

    assert proxy.injected == Counter({"0 NoAnswer": 3}) and retries.total == 3
    assert {k: stored(endpoints, key)[k] for k in ("run_id", "token", "work")} == {
        "run_id": None,
        "token": 1,
        "work": {"plan": 1},
    }


def test_a_renewal_that_times_out_is_tried_again_at_the_next_beat(
    endpoints: Endpoints, proxy: FaultProxy, key: str
) -> None:
    """Both attempts of one renewal wait longer than the client reads; the next renewal gets through."""
    s3 = through(endpoints, proxy, attempts=2, read_timeout=1)
    lease = Lease.acquire(s3, endpoints.bucket, key, "run-a", ttl=TTL, now=now)
    timeouts = proxy.inject("PUT", lease_path(endpoints, key), INTERNAL_ERROR, times=2, delay=3)
    with lease.kept_alive(every=timedelta(milliseconds=200)):
        deadline = time.monotonic() + 60
        while timeouts.seen < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = stored(endpoints, key)
        while stored(endpoints, key) == before and time.monotonic() < deadline:
            time.sleep(0.1)
        after = stored(endpoints, key)

    assert timeouts.seen == 2
    assert after != before and after["run_id"] == "run-a", "renewals stopped after a read timeout"
    lease.update({"plan": 1})


def test_a_holder_whose_renewals_time_out_until_its_expiry_stops_its_steps(
    endpoints: Endpoints, proxy: FaultProxy, key: str
) -> None:
    """No renewal gets through for longer than the lease's TTL: no run took the lease over yet, but any may, so the
    holder's next step fails with ``LeaseLost`` even once S3 answers again."""
    ttl = timedelta(seconds=3)
    s3 = through(endpoints, proxy, attempts=2, read_timeout=1)
    lease = Lease.acquire(s3, endpoints.bucket, key, "run-a", ttl=ttl, now=now)
    expired = time.monotonic() + ttl.total_seconds()  # the holder counts from before it sent the acquiring write
    proxy.inject("PUT", lease_path(endpoints, key), INTERNAL_ERROR, delay=2)
    with lease.kept_alive(quiet_spell(ttl)):
        while time.monotonic() <= expired:
            time.sleep(0.1)
    proxy.clear()

    with pytest.raises(LeaseLost, match=r"run run-a lost .*: it could not renew it within 3 s"):
        lease.update({"plan": 1})
    assert stored(endpoints, key)["run_id"] == "run-a" and stored(endpoints, key)["work"] is None
