"""Erasure requests: stored hashed, never in clear; the archiver reports a by_key topic's tombstones hashed and
keeps no kept tombstone's key in clear; a request's state against its deadline; what remains of a finished one."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafkalake.erasure import (
    ErasureReceipt,
    ErasureRequest,
    RequestStore,
    Source,
    Status,
    Subject,
    TableErasure,
    finished,
    new_request,
    receipt_token,
    status,
    tombstone_request,
    watched,
)
from kafkalake.layout import LayoutError, erasure_receipt_key, erasure_request_key, parse_data_key
from kafkalake.personal import Keyring, PseudonymKey
from spark_jobs.archiver.writer import DATA, ERASE, QUARANTINE
from tests.unit.test_writer import PLAN, layout, read, write

KEY = PseudonymKey("k1", bytes(range(32)))
EARLIER = PseudonymKey("k0", bytes(range(1, 33)))
"""The key a rotation replaced, still kept by the secret (``AWSPREVIOUS``)."""
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)


def test_requests_and_receipts_live_under_the_environment_and_are_no_data() -> None:
    assert erasure_request_key("staging", "r1") == "erasure/staging/requests/r1.json"
    assert erasure_receipt_key("staging", "r1") == "erasure/staging/receipts/r1.json"
    with pytest.raises(LayoutError, match="under the 'erasure' prefix"):
        parse_data_key("erasure/staging/requests/r1.parquet")


def test_a_request_is_stored_hashed_and_read_back(s3: Any) -> None:
    store = RequestStore(s3, "lake", "staging")
    request = new_request([KEY.digest("customer-42")], ["acme_staging.orders"], 1, KEY.key_id, NOW)
    key = store.put(request)
    body = s3.get_object(Bucket="lake", Key=key)["Body"].read().decode()
    assert "customer-42" not in body and "customer-42" not in request.request_id
    assert store.requests() == ([request], [])


def test_a_clear_identifier_or_a_malformed_object_is_refused_not_carried_out(s3: Any) -> None:
    clear = {"request_id": "r1", "created_at": NOW.isoformat(), "source": "request", "subjects": [{"digest": "bob"}]}
    s3.put_object(Bucket="lake", Key=erasure_request_key("staging", "r1"), Body=json.dumps(clear).encode())
    s3.put_object(Bucket="lake", Key=erasure_request_key("staging", "r2"), Body=b'{"subjects": []}')
    requests, problems = RequestStore(s3, "lake", "staging").requests()
    assert requests == []
    assert "a subject is not a keyed hash (64 hex characters); never store it in clear" in problems[0]
    assert "bob" not in problems[0]
    assert "r2.json: not an erasure request (KeyError" in problems[1]


def test_a_digest_under_an_earlier_key_is_refused_in_clear_too_and_a_request_names_its_key(s3: Any) -> None:
    digest = KEY.digest("bob")
    earlier = {"digest": digest, "earlier_keys": {"k0": "bob"}}
    base = {"created_at": NOW.isoformat(), "source": "request", "key_id": "k1"}
    s3.put_object(
        Bucket="lake",
        Key=erasure_request_key("staging", "r1"),
        Body=json.dumps({**base, "request_id": "r1", "subjects": [earlier]}).encode(),
    )
    unnamed = {**base, "request_id": "r2", "key_id": "", "subjects": [{"digest": digest}]}
    s3.put_object(Bucket="lake", Key=erasure_request_key("staging", "r2"), Body=json.dumps(unnamed).encode())
    requests, problems = RequestStore(s3, "lake", "staging").requests()
    assert requests == []
    assert "never store it in clear" in problems[0] and "bob" not in problems[0]
    assert "r2.json: key_id must name the pseudonym key" in problems[1]
    kept = new_request([{"k1": digest, "k0": KEY.digest("x")}], [], 1, "k1", NOW)
    assert ErasureRequest.parse(json.loads(kept.to_json()), "here") == kept


def test_a_plans_tombstones_make_one_request_the_last_tombstone_per_key_and_partition_covering_the_others() -> None:
    a, b = KEY.digest("a"), KEY.digest("b")
    request = tombstone_request(
        "acme_staging.orders", "plan1", NOW.isoformat(), [(a, 0, 5), (a, 0, 9), (b, 1, 3)], within_days=2, key_id="k1"
    )
    assert request.request_id == "tombstones-acme_staging.orders-plan1"
    assert request.subjects == (Subject(a, 0, 9), Subject(b, 1, 3))
    assert (request.source, request.tables, request.deadline) == (
        Source.TOMBSTONES,
        ("acme_staging.orders",),
        NOW + timedelta(days=2),
    )
    assert ErasureRequest.parse(json.loads(request.to_json()), "here") == request


def test_a_tombstone_request_holds_its_keys_digest_under_every_key_and_reads_back_as_older_ones_do() -> None:
    """Rows archived before a rotation hold the earlier key's digest: the request names it too (``earlier_keys``),
    its ``digest`` under the current key as before; a redo of the plan writes the same bytes; a request stored
    before tombstones had earlier keys still parses."""
    a = {"k1": KEY.digest("a"), "k0": EARLIER.digest("a")}
    made: list[tuple[str | dict[str, str], int, int]] = [(dict(a), 0, 5), (dict(a), 0, 9), (KEY.digest("b"), 1, 3)]
    request = tombstone_request("db.t", "plan1", NOW.isoformat(), made, within_days=1, key_id="k1")
    assert request.subjects == (
        Subject(KEY.digest("a"), 0, 9, {"k0": EARLIER.digest("a")}),
        Subject(KEY.digest("b"), 1, 3),
    )
    assert request.subjects[0].digests("k1") == a
    body = request.to_json()
    assert ErasureRequest.parse(json.loads(body), "here") == request
    assert tombstone_request("db.t", "plan1", NOW.isoformat(), made, within_days=1, key_id="k1").to_json() == body
    older = json.loads(body)
    for subject in older["subjects"]:
        del subject["earlier_keys"]
    assert ErasureRequest.parse(older, "here").subjects == (
        Subject(KEY.digest("a"), 0, 9),
        Subject(KEY.digest("b"), 1, 3),
    )


def test_the_writer_reports_a_by_key_topics_tombstones_by_keyed_hash_only(s3: Any) -> None:
    plain = write(PLAN, layout())
    assert not [r for r in plain if r["kind"] == ERASE]
    hashed = write(PLAN, dataclasses.replace(layout(), erasure_keys=Keyring(KEY)))
    erasures = [(r["key"], r["kafka_partition"], r["first_offset"]) for r in hashed if r["kind"] == ERASE]
    assert erasures == [(KEY.digest_bytes(b"k2"), 0, 2)]
    assert KEY.digest_bytes(b"k2") == KEY.digest("k2")


def test_a_by_key_topics_kept_tombstone_keeps_its_offsets_but_not_its_key_in_clear(s3: Any) -> None:
    """The delete-log row is the tombstone itself: in a by_key topic (which archives keys, ``catalog validate``
    says) its ``_key`` is null, so no row, the log included, keeps the erased key once the request has erased the
    earlier ones; the other rows keep theirs, and the request still gets the key's hash at the tombstone's offset,
    under each key the archiver holds."""
    keys = Keyring(KEY, (EARLIER,))
    outcome = write(PLAN, dataclasses.replace(layout(keep=True, extra=("_key",)), erasure_keys=keys))
    rows = [r for k in (o["key"] for o in outcome if o["kind"] == DATA) for r in read(s3, k).to_pylist()]
    assert [(r["_kafka_offset"], r["_key"]) for r in rows if r.get("_tombstone")] == [(2, None)]
    kept = sorted((r["_kafka_offset"], r["_key"]) for r in rows if not r.get("_tombstone"))
    assert kept == [(o, f"k{o}".encode()) for o in (0, 1, 3, 5, 7)]
    bodies = [
        s3.get_object(Bucket="lake", Key=o["key"])["Body"].read() for o in outcome if o["kind"] in (DATA, QUARANTINE)
    ]
    assert not [b for b in bodies if b"k2" in b]  # nor in Parquet's statistics
    assert [(r["key_id"], r["key"], r["first_offset"]) for r in outcome if r["kind"] == ERASE] == [
        ("k1", KEY.digest_bytes(b"k2"), 2),
        ("k0", EARLIER.digest_bytes(b"k2"), 2),
    ]


def test_state_against_the_deadline() -> None:
    request = new_request([KEY.digest("x")], [], 1, "k1", NOW)
    assert status(request, None, NOW + timedelta(hours=23)) == Status.PENDING
    assert status(request, None, NOW + timedelta(hours=25)) == Status.LATE
    assert status(request, {"finished_at": (NOW + timedelta(hours=2)).isoformat()}, NOW) == Status.DONE
    assert status(request, {"finished_at": (NOW + timedelta(days=2)).isoformat()}, NOW) == Status.LATE


def test_done_tombstone_requests_stay_watched_within_their_window_and_a_reopened_receipt_adds_up() -> None:
    tombstones = tombstone_request("db.t", "p1", NOW.isoformat(), [(KEY.digest("a"), 0, 5)], within_days=1, key_id="k")
    explicit = new_request([KEY.digest("b")], [], 1, "k1", NOW)
    started, finished = NOW + timedelta(hours=1), NOW + timedelta(hours=2)
    earlier = ErasureReceipt(tombstones.request_id, [KEY.digest("a")], started.isoformat(), finished.isoformat())
    earlier.tables["db.t"] = TableErasure([["1", "2026-11-20", "06"]], 2, 1)
    earlier.objects_deleted, earlier.versions_deleted = ["data/x"], 4
    receipts = {r.request_id: json.loads(earlier.to_json()) for r in (tombstones, explicit)}
    assert watched([tombstones, explicit], receipts, finished + timedelta(hours=23)) == [(tombstones, started)]
    assert watched([tombstones, explicit], receipts, finished + timedelta(hours=25)) == []
    later = ErasureReceipt(
        tombstones.request_id, [KEY.digest("a")], NOW.isoformat(), (NOW + timedelta(days=1)).isoformat()
    )
    later.tables["db.t"] = TableErasure([["1", "2026-11-20", "07"]], 1, 0)
    later.objects_deleted, later.versions_deleted = ["data/y"], 2
    later.amend(receipts[tombstones.request_id])
    assert (later.started_at, later.objects_deleted, later.versions_deleted) == (
        started.isoformat(),
        ["data/x", "data/y"],
        6,
    )
    assert later.tables["db.t"] == TableErasure([["1", "2026-11-20", "07"], ["1", "2026-11-20", "06"]], 3, 1)


def test_a_finished_request_remains_as_its_receipt_tokens_only_and_reads_back_done(s3: Any) -> None:
    """An explicit request is finished at its receipt, a tombstone request once its watch is over; what remains holds
    no digest under any key, names its subjects as the receipt does, and is neither pending nor watched again."""
    both = {KEY.key_id: KEY.digest("a"), EARLIER.key_id: EARLIER.digest("a")}
    tombstones = tombstone_request("db.t", "p1", NOW.isoformat(), [(both, 0, 5)], within_days=1, key_id=KEY.key_id)
    explicit = new_request([both], [], 1, KEY.key_id, NOW)
    pending_one = new_request([KEY.digest("b")], [], 1, KEY.key_id, NOW)
    done_at = NOW + timedelta(hours=2)
    receipts = {
        r.request_id: {"started_at": NOW.isoformat(), "finished_at": done_at.isoformat(), "subjects": r.tokens()}
        for r in (tombstones, explicit)
    }
    requests = [tombstones, explicit, pending_one]
    assert finished(requests, receipts, done_at) == [explicit], "the tombstone request is still watched"
    assert finished(requests, receipts, done_at + timedelta(days=1, minutes=1)) == [tombstones, explicit]

    store = RequestStore(s3, "lake", "staging")
    for request in (tombstones, explicit):
        remains = request.remains()
        body = s3.get_object(Bucket="lake", Key=store.put(remains))["Body"].read().decode()
        assert not [d for d in both.values() if d in body], "no digest under any key"
        assert remains.tokens() == request.tokens() == [receipt_token(KEY.digest("a"))]
        assert remains.remains() == remains, "taken once"
        assert [(s.kafka_partition, s.before_offset) for s in remains.subjects] == [
            (s.kafka_partition, s.before_offset) for s in request.subjects
        ]
    read, problems = store.requests()
    assert problems == [] and all(r.done for r in read) and len(read) == 2
    later = done_at + timedelta(days=1, minutes=1)
    assert finished(read, receipts, later) == [] and watched(read, receipts, done_at) == []
    assert {status(r, receipts[r.request_id], later) for r in read} == {Status.DONE}


def test_an_upsert_topics_change_objects_keep_a_tombstones_key_for_its_commit_to_delete_by(s3: Any) -> None:
    """An upsert table's change objects (``changes_only``) are read by the plan's commit, which deletes the
    tombstone's key from the table, and are then the compactor's or the erasure's to remove: their delete-log row
    keeps the key, and the erasure request still gets its hash."""
    keys = Keyring(KEY, (EARLIER,))
    changes = dataclasses.replace(layout(keep=True, extra=("_key",)), erasure_keys=keys, changes_only=True)
    outcome = write(PLAN, changes)
    rows = [r for k in (o["key"] for o in outcome if o["kind"] == DATA) for r in read(s3, k).to_pylist()]
    assert [(r["_kafka_offset"], r["_key"]) for r in rows if r.get("_tombstone")] == [(2, b"k2")]
    assert [(r["key_id"], r["first_offset"]) for r in outcome if r["kind"] == ERASE] == [("k1", 2), ("k0", 2)]
