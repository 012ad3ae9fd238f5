"""Erasure leaves nothing, its own records included: after an erasure by subject and by tombstone, on a Hive and on an
Iceberg table whose pseudonym key was rotated between two plans, no version of any object in the whole bucket holds
the subject's digest or the tombstoned key's under either key id, the requests included. What remains of a done
request holds its receipt tokens only: an explicit request's at its receipt, a tombstone request's once its watch for
late rows is over."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, Status, new_request, status
from kafkalake.layout import erasure_request_key
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.sandbox import with_bucket
from spark_jobs.compaction.work import Knobs
from spark_jobs.erasure.job import Eraser
from tests.integration.archive_helpers import rotating_secret
from tests.integration.lake_files import traces
from tests.integration.test_erasure import GONE, RUN, SUBJECT, archive, poison, produce, register, write_catalog

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("table_format", [TableFormat.HIVE, TableFormat.ICEBERG])
def test_a_done_erasure_leaves_no_digest_of_its_subjects_in_any_version_of_the_bucket(
    spark: SparkSession, local_stack: Endpoints, tmp_path: Path, table_format: TableFormat
) -> None:
    """A by_key table (its key stored hashed, a quarantined record of the tombstoned key) and a table erased by
    subject field, each archived in a plan under k1 and one under k2; the explicit request holds the subject's digest
    under both keys, the tombstone's request its key's under both. The first run leaves only the watched tombstone
    request holding a digest; a run past its watch leaves none."""
    suffix = uuid.uuid4().hex[:8]
    endpoints = with_bucket(local_stack, f"kafkalake-erasure-remains-{table_format}")
    rotating = rotating_secret(endpoints, suffix)
    own, k1, k2 = rotating.endpoints, rotating.old, rotating.new
    env = f"r{suffix}"
    keyed, fields = write_catalog(tmp_path / "catalog", env, archive={"key": "hmac"}, table_format=table_format)
    if table_format == TableFormat.ICEBERG:
        make_client(own, "glue").create_database(DatabaseInput={"Name": keyed.database})
    people = [(p, p, 0) for p in ("person-0", "person-1")]
    produce(own, keyed, [*people, (SUBJECT, SUBJECT, 0), (GONE, "person-x", 0)])
    poison(own, keyed)  # quarantined, its key hashed under k1
    produce(own, fields, [*people, ("any", SUBJECT, 0)])
    for topic in (keyed, fields):
        archive(spark, own, topic)
    rotating.rotate()
    produce(own, keyed, [(SUBJECT, SUBJECT, 1), (GONE, "person-y", 1), (GONE, None, 1)])  # the tombstone last
    produce(own, fields, [("other", SUBJECT, 1)])
    for topic in (keyed, fields):
        archive(spark, own, topic)
        if table_format == TableFormat.HIVE:
            register(own, topic)
    s3 = make_client(own, "s3")
    store = RequestStore(s3, own.bucket, env)
    [tombstones], _ = store.requests()
    explicit = new_request([{k.key_id: k.digest(SUBJECT) for k in (k1, k2)}], [], 1, k2.key_id, datetime.now(UTC))
    store.put(explicit)
    digests = [k.digest(name).encode() for k in (k1, k2) for name in (SUBJECT, GONE)]
    held = {name.split("@")[0] for name in traces(s3, own.bucket, "", digests)}
    assert {erasure_request_key(env, r.request_id) for r in (tombstones, explicit)} < held, "the requests hold them"
    assert any(name.startswith(keyed.prefix.data_prefix()) for name in held), "so do the rows"

    first = Eraser(spark, own, env, [keyed, fields], Knobs(grace_period=timedelta(0)), run=RUN).run()
    assert (sorted(first.receipts), first.failed) == (sorted([tombstones.request_id, explicit.request_id]), {})
    watched = {name.split("@")[0] for name in traces(s3, own.bucket, "", digests)}
    assert watched == {erasure_request_key(env, tombstones.request_id)}, "only the watched request keeps its digests"

    past_watch = lambda: datetime.now(UTC) + timedelta(days=tombstones.within_days, minutes=1)  # noqa: E731
    second = Eraser(spark, own, env, [keyed, fields], Knobs(grace_period=timedelta(0)), run=RUN, now=past_watch).run()
    assert (second.receipts, second.failed, second.pending) == ([], {}, 0)
    assert traces(s3, own.bucket, "", digests) == [], "no version of any object holds a digest of them"
    receipts = store.receipts()
    remains, problems = store.requests()
    assert problems == [] and sorted(r.request_id for r in remains) == sorted(receipts)
    for request in remains:
        receipt = receipts[request.request_id]
        assert request.done and request.tokens() == receipt["subjects"], "the remains name them as the receipt does"
        assert status(request, receipt, datetime.now(UTC)) == Status.DONE
