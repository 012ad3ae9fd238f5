"""The Kafka key and headers declared personal (issue #35): ``archive.key`` and ``archive.headers`` (``drop``,
``clear``, ``hmac``) with the older booleans still read, what ``catalog validate`` refuses, the ``pii`` LF-tag and the
access matrix; on a bare local session (chispa-style: DataFrame in, rows out) the archiver's digests of the key and
of each header's value, quarantine included, and the erasure scan comparing a stored key digest, by tombstone and by
subject, under its row's key id, and a tombstone's digests under every key (rows of before a rotation); the writer
digests a tombstone's clear key, which reaches it beside the hashed ``_key`` and is written nowhere, under every
key."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from kafkalake.erasure import new_request, tombstone_request
from kafkalake.permissions import table_tags_of
from kafkalake.personal import KEY_ID_COLUMN, Keyring, PseudonymKey
from kafkalake.topic_catalog import Topic, TopicCatalogInvalid, load_topic_catalog, tables_document
from kafkalake.topic_spec import ArchivePolicy, StoredAs, TopicSpec
from kafkalake.wire import encode
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import PassMember, prepared
from spark_jobs.archiver.topic_run import plan_layout
from spark_jobs.archiver.transform import TOMBSTONE_KEY_COLUMN, VersionSchema
from spark_jobs.archiver.writer import DATA, ERASE, QUARANTINE, PlanWriter
from spark_jobs.erasure.matching import matching_rows, scope
from spark_jobs.erasure.subjects import subject_columns
from tests.unit.test_writer import ENDPOINTS, PLAN, SCHEMA, layout, read

KEY = PseudonymKey("k-2026", bytes(range(40)))
EARLIER = PseudonymKey("k-2025", bytes(range(1, 41)))
NOW = datetime(2026, 11, 21, tzinfo=UTC)
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def topic(archive: dict[str, Any], **spec: Any) -> Topic:
    policy = TopicSpec.model_validate({"archive": archive, **spec})
    return Topic("orders", "acme", "shop", "staging", policy, (json.dumps(ORDER),), Path("orders.yaml"))


def write_topic(root: Path, body: str) -> Path:
    folder = root / "acme" / "shop" / "staging"
    folder.mkdir(parents=True)
    (folder / "orders.yaml").write_text(body)
    (folder / "orders.v1.avsc").write_text(json.dumps(ORDER))
    return folder / "orders.yaml"


def test_the_archive_keeps_the_key_and_headers_as_declared_and_older_files_read_the_same() -> None:
    assert topic({}).kafka_columns == {}
    hashed = topic({"key": "hmac", "headers": "clear"})
    assert hashed.kafka_columns == {"_key": StoredAs.HMAC, "_headers": StoredAs.CLEAR}
    assert ArchivePolicy.model_validate({"include_key": True, "include_headers": False}) == ArchivePolicy(
        key=StoredAs.CLEAR, headers=StoredAs.DROP
    )
    assert (topic({}).needs_key, topic({"key": "clear"}).needs_key) == (False, False)
    assert topic({"headers": "hmac"}).needs_key and hashed.needs_key


def test_catalog_validate_refuses_two_names_of_one_setting_and_the_kafka_columns_as_value_fields(
    tmp_path: Path,
) -> None:
    path = write_topic(tmp_path / "a", "archive: {include_key: true, key: hmac}\n")
    with pytest.raises(TopicCatalogInvalid) as both:
        load_topic_catalog(tmp_path / "a")
    assert [(p.file, p.field) for p in both.value.problems] == [(str(path), "archive")]
    assert "include_key is the older name of key: keep key only" in both.value.problems[0].message
    path = write_topic(tmp_path / "b", "pii: {_key: hmac, _headers: hmac}\nsubject_fields: [_key]\n")
    with pytest.raises(TopicCatalogInvalid) as kafka:
        load_topic_catalog(tmp_path / "b")
    assert [str(p) for p in kafka.value.problems] == [
        f"{path}: pii._headers: _headers holds the record's Kafka headers, not a field of its value: pii names value "
        "fields (fix: declare how the archive keeps the headers instead: archive: {headers: hmac} (drop leaves it "
        "out))",
        f"{path}: pii._key: _key holds the record's Kafka key, not a field of its value: pii names value fields "
        "(fix: declare how the archive keeps the key instead: archive: {key: hmac} (drop leaves it out))",
        f"{path}: subject_fields._key: _key holds the record's Kafka key, not a field of its value "
        "(fix: declare erasure: by_key instead)",
    ]
    write_topic(tmp_path / "c", "erasure: by_key\narchive: {key: hmac, headers: hmac}\n")
    assert load_topic_catalog(tmp_path / "c").topics[0].erasable


def test_the_stored_key_and_headers_carry_the_pii_tag_and_the_access_matrix_shows_them() -> None:
    stored = topic({"key": "hmac", "headers": "clear"})
    tags = table_tags_of(stored)
    assert (tags.columns, tags.personal_columns) == (("id", "_key", "_headers"), ("_headers", "_key"))
    assert tables_document([stored])[0]["personal_columns"] == ["_headers", "_key"]
    dropped = table_tags_of(topic({"key": "drop"}))
    assert (dropped.columns, dropped.personal_columns) == (("id",), ())


def test_the_writer_gets_the_kafka_columns_and_the_key_id_when_the_key_or_headers_are_hashed() -> None:
    versions = [VersionSchema(1, 11, json.dumps(ORDER))]
    keys = Keyring(KEY, (EARLIER,))
    hashed = plan_layout(
        ENDPOINTS, topic({"key": "hmac", "headers": "hmac"}, erasure="by_key"), versions, {1: "_value_v1"}, keys
    )
    assert (hashed.extra_columns, hashed.erasure_keys) == (("_key", "_headers", KEY_ID_COLUMN), keys)
    clear = plan_layout(ENDPOINTS, topic({"key": "clear"}), versions, {1: "_value_v1"}, keys)
    assert (clear.extra_columns, clear.erasure_keys) == (("_key",), None)


def test_the_archiver_stores_the_digest_of_the_key_and_of_each_header_value_in_every_row(
    bare_spark: SparkSession,
) -> None:
    """Data rows, the tombstone and the quarantined record: none keeps the clear key in ``_key`` (one type, the
    digest, in every row); header names stay. The tombstone's clear key goes to the writer in ``_tombstone_key``
    only, for its digests under every key."""
    hashed = topic({"key": "hmac", "headers": "hmac"}, erasure="by_key")
    value = encode(11, json.dumps(ORDER), {"id": "a"})
    raw = bare_spark.createDataFrame(
        [
            (b"cust-1", value, 0, 0, NOW, [("trace", b"t-1"), ("empty", None)]),
            (b"cust-1", None, 0, 1, NOW, []),
            (b"cust-2", b"\x00bad", 0, 2, NOW, None),
            (None, value, 0, 3, NOW, []),
        ],
        "key binary, value binary, partition int, offset long, timestamp timestamp, "
        "headers array<struct<key:string, value:binary>>",
    )
    member = PassMember(
        hashed, Plan(hashed.kafka_topic, NOW.isoformat(), {}), (VersionSchema(1, 11, json.dumps(ORDER)),)
    )
    rows = prepared(raw, [member], key=KEY)
    columns = ("_kafka_offset", "_error", "_key", "_headers", KEY_ID_COLUMN, TOMBSTONE_KEY_COLUMN)
    actual = rows.select(*columns).orderBy("_kafka_offset")
    one, two = KEY.digest_bytes(b"cust-1"), KEY.digest_bytes(b"cust-2")
    expected = bare_spark.createDataFrame(
        [
            (0, None, one, [("trace", KEY.digest_bytes(b"t-1")), ("empty", None)], KEY.key_id, None),
            (1, "tombstone", one, [], KEY.key_id, bytearray(b"cust-1")),
            (2, "truncated", two, None, KEY.key_id, None),
            (3, None, None, [], KEY.key_id, None),
        ],
        "_kafka_offset long, _error string, _key string, _headers array<struct<key:string, value:string>>, "
        "_pseudonym_key_id string, _tombstone_key binary",
    )
    assert actual.schema.simpleString() == expected.schema.simpleString()
    assert actual.collect() == expected.collect()


@pytest.mark.parametrize(
    ("archive", "tombstones", "data_keys"),
    [
        ({}, "drop", [None, None]),
        ({"key": "clear"}, "drop", [b"cust-1", b"cust-3"]),
        ({}, "keep", [b"cust-1", b"cust-3"]),
    ],
)
def test_a_data_rows_key_reaches_the_writer_only_when_its_objects_keep_it(
    bare_spark: SparkSession, archive: dict[str, Any], tombstones: str, data_keys: list[bytes | None]
) -> None:
    """A topic that drops the key (the default) hands its data rows to the writer without it (the copy into the
    Arrow batches was a tenth of the plan's Spark-side CPU); a tombstone and a quarantined record keep theirs (the
    delete log, the quarantine's raw bytes), as do the data rows of a topic that archives the key or keeps its
    tombstones (their delete log sits beside the data rows)."""
    plain = topic(archive, tombstones=tombstones)
    value = encode(11, json.dumps(ORDER), {"id": "a"})
    raw = bare_spark.createDataFrame(
        [
            (b"cust-1", value, 0, 0, NOW),
            (b"cust-1", None, 0, 1, NOW),
            (b"cust-2", b"\x00bad", 0, 2, NOW),
            (b"cust-3", value, 0, 3, NOW),
        ],
        "key binary, value binary, partition int, offset long, timestamp timestamp",
    )
    member = PassMember(plain, Plan(plain.kafka_topic, NOW.isoformat(), {}), (VersionSchema(1, 11, json.dumps(ORDER)),))
    rows = prepared(raw, [member], key=None).orderBy("_kafka_offset").collect()
    assert [(r["_error"], r["_key"]) for r in rows] == [
        (None, data_keys[0]),
        ("tombstone", b"cust-1"),
        ("truncated", b"cust-2"),
        (None, data_keys[1]),
    ]


def test_a_hashed_keys_tombstone_is_reported_under_every_key_and_its_clear_key_stored_nowhere(s3: Any) -> None:
    """Rows as ``prepared`` gives them with ``archive.key: hmac``: ``_key`` the digest under the current key, the
    tombstone's clear key in ``_tombstone_key``. Its digests under the current key (the one its later rows hold) and
    under the earlier one (its rows of before the rotation); the kept delete-log row has a null ``_key``."""
    rows = [{**r, "_key": KEY.digest_bytes(r["_key"])} for r in PLAN]
    schema = SCHEMA.set(SCHEMA.get_field_index("_key"), pa.field("_key", pa.string()))
    keys = Keyring(KEY, (EARLIER,))
    writer = PlanWriter([dataclasses.replace(layout(keep=True, extra=("_key",)), erasure_keys=keys)])
    outcome = pa.Table.from_batches(list(writer(iter(pa.Table.from_pylist(rows, schema=schema).to_batches()))))
    erasures = [(r["key_id"], r["key"], r["first_offset"]) for r in outcome.to_pylist() if r["kind"] == ERASE]
    assert erasures == [(KEY.key_id, KEY.digest_bytes(b"k2"), 2), (EARLIER.key_id, EARLIER.digest_bytes(b"k2"), 2)]
    written = [r["key"] for r in outcome.to_pylist() if r["kind"] in (DATA, QUARANTINE)]
    stored = [row for name in written for row in read(s3, name).to_pylist()]
    assert [(r["_kafka_offset"], r["_key"]) for r in stored if r.get("_tombstone")] == [(2, None)]
    assert {r["_key"] for r in stored if not r.get("_tombstone")} == {
        KEY.digest_bytes(f"k{o}".encode()) for o in range(8) if o != 2
    }, "data and quarantine rows keep their digest"
    bodies = [s3.get_object(Bucket="lake", Key=name)["Body"].read() for name in written]
    assert not [b for b in bodies if b"k2" in b or b"_tombstone_key" in b]


def frames(spark: SparkSession) -> dict[str, DataFrame]:
    """A by_key table's rows as its files hold them: the key's digest with its key id (``archive.key: hmac``), or
    the clear key (``clear``, and files of before the switch)."""
    columns = "file string, _kafka_partition int, _kafka_offset long"
    hashed = [
        ("f1", 0, 1, KEY.digest("cust-1"), KEY.key_id),
        ("f2", 0, 3, EARLIER.digest("cust-1"), EARLIER.key_id),  # hashed before the rotation: the tombstone's too
        ("f1", 0, 7, KEY.digest("cust-1"), KEY.key_id),  # after the tombstone
        ("f1", 1, 2, KEY.digest("cust-1"), KEY.key_id),  # another Kafka partition
        ("f2", 0, 4, EARLIER.digest("cust-2"), EARLIER.key_id),  # hashed before the rotation
        ("f2", 0, 5, KEY.digest("cust-1"), EARLIER.key_id),  # under another key id: not the tombstone's digest
    ]
    clear = [("f1", 0, 1, b"cust-1"), ("f1", 0, 7, b"cust-1"), ("f2", 0, 4, b"cust-2")]
    return {
        "hmac": spark.createDataFrame(hashed, f"{columns}, _key string, {KEY_ID_COLUMN} string"),
        "clear": spark.createDataFrame(clear, f"{columns}, _key binary"),
    }


@pytest.mark.parametrize("stored", ["hmac", "clear"])
def test_the_erasure_scan_compares_a_stored_key_digest_under_its_rows_key_id(
    bare_spark: SparkSession, stored: str
) -> None:
    """A digest is compared as it is, under its row's key id: no key material needed for it (the job holds only the
    current key), and a tombstone's digest under the earlier key finds the rows hashed before the rotation; a clear
    key is hashed in the scan, as before, under the key the job holds (the tombstone's earlier digest, whose key it
    no longer holds, is not needed)."""
    by_key = topic({"key": stored}, erasure="by_key")
    table = f"{by_key.database}.{by_key.table}"
    both = {KEY.key_id: KEY.digest_bytes(b"cust-1"), EARLIER.key_id: EARLIER.digest_bytes(b"cust-1")}
    tombstones = tombstone_request(table, "p1", NOW.isoformat(), [(both, 0, 6)], within_days=1, key_id=KEY.key_id)
    subject = {KEY.key_id: KEY.digest("cust-2"), EARLIER.key_id: EARLIER.digest("cust-2")}
    explicit = new_request([subject], [], 1, KEY.key_id, NOW)
    frame = frames(bare_spark)[stored]
    columns = subject_columns(frame, by_key)
    assert (columns.stored_key is not None, columns.kafka_key is not None) == (stored == "hmac", stored == "clear")
    wanted = scope(by_key, [tombstones, explicit])
    assert sorted(wanted.tombstones) == sorted((k, d, 0, 6) for k, d in both.items())
    found = matching_rows(bare_spark, frame, by_key, keys=Keyring(KEY), wanted=wanted, fields=True)
    assert found is not None
    rows = sorted(tuple(r) for r in found.distinct().collect())
    cust_2 = ("f2", 0, 4, EARLIER.key_id, EARLIER.digest("cust-2"), None)
    if stored == "clear":  # hashed under the request's key only: the job holds no other
        cust_2 = ("f2", 0, 4, KEY.key_id, KEY.digest("cust-2"), None)
    earlier = [("f2", 0, 3, EARLIER.key_id, EARLIER.digest("cust-1"), 6)] if stored == "hmac" else []
    assert rows == sorted([("f1", 0, 1, KEY.key_id, KEY.digest("cust-1"), 6), cust_2, *earlier])
