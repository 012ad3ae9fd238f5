"""The subject index on the local stack: it names exactly the partitions that hold a subject, the erasure job reads
only those (and objects the index does not cover yet), a refresh reads only new objects and covers compaction
output from its inputs unread, a changed declaration rebuilds it, segments merge, and of two runs racing for its
record only one commits."""

from __future__ import annotations

import dataclasses
import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from infra.repo import catalog_dir
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, new_request, tombstone_request
from kafkalake.layout import DataKey, Partition, TablePrefix
from kafkalake.personal import Keyring, PseudonymKey, load_key
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.local.erase_requests import record_request
from kafkalake_dev.local.principals import not_recorded
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import customer_file, put_table, with_bucket
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Action, Knobs
from spark_jobs.erasure import index
from spark_jobs.erasure.job import Eraser
from spark_jobs.erasure.matching import find, scope
from tests.integration.archive_helpers import rotating_secret
from tests.integration.lake_files import version_tables

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-erasure-index-tests"
SUBJECT = "subject-indexed-1"
HOURS = 6
HOLDING = (1, 4)
"""The hours whose first file holds the subject's row."""
START = datetime(2026, 11, 2, tzinfo=UTC)
NO_GRACE = Knobs(min_input_files=1, grace_period=timedelta(0))


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    found = with_bucket(local_stack, BUCKET)
    ensure_pseudonym_key(make_client(found, "secretsmanager"))
    return found


@pytest.fixture
def key(endpoints: Endpoints) -> PseudonymKey:
    return load_key(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)


@dataclasses.dataclass(frozen=True)
class Lake:
    topic: Topic
    files: dict[Partition, list[tuple[DataKey, bytes]]]

    def partition(self, hour: int) -> Partition:
        at = START + timedelta(hours=hour)
        return Partition(1, at.date(), at.hour)

    def key_of(self, hour: int, number: int) -> str:
        return dataclasses.replace(self.files[self.partition(hour)][number][0], table=self.topic.prefix).key()


def make_lake(endpoints: Endpoints, erasure: str) -> Lake:
    """A table of its own erased by ``customer_id`` (and, ``by_key``, by its Kafka key, each row's customer id): HOURS
    partitions of two files of Kafka partition 0, the subject in HOLDING's."""
    suffix = uuid.uuid4().hex[:8]
    template = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
    spec = template.spec.model_copy(update={"database": f"index_{suffix}", "erasure": erasure})
    topic = dataclasses.replace(template, env=f"i{suffix}", spec=spec)
    assert topic.spec.subject_fields == ("customer_id",)
    files: dict[Partition, list[tuple[DataKey, bytes]]] = {}
    for hour in range(HOURS):
        partition = Partition(1, (START + timedelta(hours=hour)).date(), hour)
        for number in range(2):
            first = (hour * 2 + number) * 20
            customers = [f"customer-{first + i}" for i in range(20)]
            if number == 0 and hour in HOLDING:
                customers[3] = SUBJECT
            body = customer_file(customers, 0, first, partition, keyed=erasure == "by_key")
            files.setdefault(partition, []).append((DataKey(topic.prefix, partition, 0, first, first + 19), body))
    put_table(endpoints, topic, files)
    return Lake(topic, files)


@pytest.fixture
def lake(endpoints: Endpoints) -> Lake:
    return make_lake(endpoints, "none")


def refreshed(spark: SparkSession, endpoints: Endpoints, topic: Topic, key: PseudonymKey) -> index.Index:
    found = index.refresh(spark, make_client(endpoints, "s3"), endpoints.bucket, topic, Keyring(key))
    assert found is not None
    return found


def record_etag(endpoints: Endpoints, topic: Topic) -> str:
    return str(make_client(endpoints, "s3").head_object(Bucket=BUCKET, Key=topic.prefix.subject_index_key())["ETag"])


def add_object(
    endpoints: Endpoints, lake: Lake, hour: int, customers: list[str], first: int, kafka_partition: int = 1
) -> str:
    partition = lake.partition(hour)
    name = DataKey(lake.topic.prefix, partition, kafka_partition, first, first + len(customers) - 1).key()
    body = customer_file(customers, kafka_partition, first, partition, keyed=lake.topic.spec.erasure == "by_key")
    make_client(endpoints, "s3").put_object(Bucket=BUCKET, Key=name, Body=body)
    return name


def test_the_index_names_the_partitions_holding_a_subject_and_the_erasure_reads_only_those(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, key: PseudonymKey
) -> None:
    s3 = make_client(endpoints, "s3")
    kept = refreshed(spark, endpoints, lake.topic, key)
    assert kept.refreshed.scanned == HOURS * 2
    digest = key.digest(SUBJECT)
    hits = kept.hits(spark, [digest])
    assert hits.partitions == {lake.partition(h).path() for h in HOLDING}
    assert kept.hits(spark, [key.digest("nobody-here")]).partitions == set()
    # an object the index covers, in a partition without the subject, is never read again: make it unreadable
    s3.put_object(Bucket=BUCKET, Key=lake.key_of(0, 1), Body=b"not parquet: only a scan of the whole table reads it")
    wanted = scope(lake.topic, [new_request([digest], [], 1, key.key_id, datetime.now(UTC))])
    found = find(spark, s3, BUCKET, lake.topic, keys=Keyring(key), wanted=wanted, hits=hits)
    assert sorted(found.partitions) == sorted(lake.partition(h).path() for h in HOLDING)
    with pytest.raises(Exception, match=r"(?i)parquet"):
        find(spark, s3, BUCKET, lake.topic, keys=Keyring(key), wanted=wanted)  # without the index: every file
    # an object written after the refresh is not covered: read, whatever the index says
    late = add_object(endpoints, lake, 2, [SUBJECT, "customer-late"], 1000)
    assert hits.wants(late) and not hits.wants(lake.key_of(3, 0))
    found = find(spark, s3, BUCKET, lake.topic, keys=Keyring(key), wanted=wanted, hits=hits)
    assert lake.partition(2).path() in found.partitions
    # the erasure job: the index refreshed (only the new object read), the subject's rows gone, the bad object untouched
    RequestStore(s3, BUCKET, lake.topic.env).put(new_request([digest], [], 1, key.key_id, datetime.now(UTC)))
    outcome = Eraser(spark, endpoints, lake.topic.env, [lake.topic], NO_GRACE).run()
    assert (len(outcome.receipts), outcome.failed) == (1, {})
    [receipt] = RequestStore(s3, BUCKET, lake.topic.env).receipts().values()
    [table] = receipt["tables"].values()
    assert table["rows_removed"] == len(HOLDING) + 1
    assert sorted(table["partitions"]) == sorted(lake.partition(h).values() for h in (*HOLDING, 2))


def test_late_rows_of_a_done_tombstone_request_are_looked_for_through_the_index(
    spark: SparkSession, endpoints: Endpoints, key: PseudonymKey
) -> None:
    lake = make_lake(endpoints, "by_key")
    s3, table = make_client(endpoints, "s3"), f"{lake.topic.database}.{lake.topic.table}"
    store = RequestStore(s3, BUCKET, lake.topic.env)
    now = datetime.now(UTC).isoformat()
    tombstones = tombstone_request(
        table, "p1", now, [(key.digest(SUBJECT), 0, 10**6)], within_days=1, key_id=key.key_id
    )
    store.put(tombstones)
    first = Eraser(spark, endpoints, lake.topic.env, [lake.topic], NO_GRACE).run()
    assert (first.receipts, first.failed) == ([tombstones.request_id], {})
    assert store.receipts()[tombstones.request_id]["tables"][table]["rows_removed"] == len(HOLDING)
    # since that batch: a late object with a row the tombstone precedes, and a covered object of an hour without
    # the subject rewritten unreadable (a scan of every object written since the batch would read it)
    add_object(endpoints, lake, 2, ["customer-late", SUBJECT], 5000, kafka_partition=0)
    s3.put_object(Bucket=BUCKET, Key=lake.key_of(3, 1), Body=b"not parquet: only a scan without the index reads it")
    late = Eraser(spark, endpoints, lake.topic.env, [lake.topic], NO_GRACE).run()
    assert (late.receipts, late.failed, late.indexed) == ([tombstones.request_id], {}, {table: 1})
    receipt = store.receipts()[tombstones.request_id]["tables"][table]
    assert receipt["rows_removed"] == len(HOLDING) + 1, "the receipt adds the late row"
    assert lake.partition(2).values() in receipt["partitions"]


def test_a_refresh_reads_only_new_objects_and_covers_compaction_output_from_its_inputs(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, key: PseudonymKey
) -> None:
    refreshed(spark, endpoints, lake.topic, key)
    etag = record_etag(endpoints, lake.topic)
    again = refreshed(spark, endpoints, lake.topic, key)
    assert (again.refreshed.scanned, again.refreshed.derived) == (0, 0)
    assert record_etag(endpoints, lake.topic) == etag, "a refresh with nothing new wrote the record"
    results = Compactor(spark, endpoints, [lake.topic], NO_GRACE).run()
    assert {r.action for r in results} == {Action.COMPACTED}
    s3 = make_client(endpoints, "s3")
    current = set(list_objects(s3, BUCKET, lake.topic.prefix.data_prefix(), ".parquet"))
    outputs = {n for n in current if n.startswith(lake.topic.prefix.compacted_prefix())}
    assert len(outputs) == HOURS and len(current) == HOURS * 3, "the replaced raw files wait for the clean-up"
    after = refreshed(spark, endpoints, lake.topic, key)
    assert (after.refreshed.scanned, after.refreshed.derived, after.refreshed.dropped) == (0, HOURS, 0)
    Compactor(spark, endpoints, [lake.topic], NO_GRACE).run()  # the clean-up deletes the replaced raw files
    after = refreshed(spark, endpoints, lake.topic, key)
    assert (after.refreshed.scanned, after.refreshed.derived, after.refreshed.dropped) == (0, 0, HOURS * 2)
    assert after.covered == outputs
    digest = key.digest(SUBJECT)
    hits = after.hits(spark, [digest])
    wanted = scope(lake.topic, [new_request([digest], [], 1, key.key_id, datetime.now(UTC))])
    found = find(spark, s3, BUCKET, lake.topic, keys=Keyring(key), wanted=wanted, hits=hits)
    assert sorted(found.partitions) == sorted(lake.partition(h).path() for h in HOLDING)
    assert sum(n for p in found.partitions.values() for n in p.rows_by_request.values()) == len(HOLDING)


def test_a_changed_declaration_rebuilds_the_index_and_segments_merge(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, key: PseudonymKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = make_client(endpoints, "s3")
    refreshed(spark, endpoints, lake.topic, key)
    by_id = dataclasses.replace(
        lake.topic, spec=lake.topic.spec.model_copy(update={"subject_fields": ("customer_id", "id")})
    )
    rebuilt = refreshed(spark, endpoints, by_id, key)
    assert rebuilt.refreshed.scanned == HOURS * 2, "a new subject field: every object read again"
    segments_prefix = f"{lake.topic.prefix.subject_index_prefix()}segments/"
    stored = list_objects(s3, BUCKET, segments_prefix)
    assert stored and all(n.startswith(rebuilt.segments) for n in stored), "the old declaration's segment is gone"
    [row_id] = [f"u-0-{(1 * 2) * 20 + 5}"]  # the id of a row of hour 1's first file
    assert rebuilt.hits(spark, [key.digest(row_id)]).partitions == {lake.partition(1).path()}
    monkeypatch.setattr(index, "MAX_SEGMENTS", 2)
    merged = []
    for number, hour in enumerate((2, 3, 5)):
        add_object(endpoints, lake, hour, [f"new-{number}", SUBJECT], 2000 + 10 * number)
        kept = refreshed(spark, endpoints, by_id, key)
        assert kept.refreshed.scanned == 1
        assert len(kept.segments) <= 2
        merged.append(kept.refreshed.merged)
    assert merged == [False, True, False], "the third segment is merged with the two before it"
    assert set(list_objects(s3, BUCKET, segments_prefix)) == {
        n for n in list_objects(s3, BUCKET, segments_prefix) if n.startswith(kept.segments)
    }
    expected = {lake.partition(h).path() for h in (*HOLDING, 2, 3, 5)}
    assert kept.hits(spark, [key.digest(SUBJECT)]).partitions == expected


def test_of_two_runs_racing_for_the_record_only_one_commits(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, key: PseudonymKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshed(spark, endpoints, lake.topic, key)
    etag = record_etag(endpoints, lake.topic)
    add_object(endpoints, lake, 0, [SUBJECT], 3000)
    loaded = index._load

    def read_before_the_other_run_wrote(s3: Any, bucket: str, name: str) -> tuple[Any, str | None]:
        record, _ = loaded(s3, bucket, name)
        return record, '"an-etag-another-run-replaced"'

    monkeypatch.setattr(index, "_load", read_before_the_other_run_wrote)
    lines: list[str] = []
    lost = index.refresh(spark, make_client(endpoints, "s3"), BUCKET, lake.topic, Keyring(key), say=lines.append)
    assert lost is None and "another run updated it first" in lines[-1]
    assert record_etag(endpoints, lake.topic) == etag, "the run that lost the race changed the record"


def hashed_file(customers: list[tuple[str, PseudonymKey]], first: int, partition: Partition) -> bytes:
    """An archiver-shaped file of a table that pseudonymises ``customer_id``: each row's id hashed with its key, the
    key's id in ``_pseudonym_key_id``."""
    at = datetime.combine(partition.dt, datetime.min.time(), UTC) + timedelta(hours=partition.hour)
    rows = len(customers)
    table = pa.table(
        {
            "id": [f"h-{first + i}" for i in range(rows)],
            "customer_id": [key.digest(c) for c, key in customers],
            "updated_at": [at.isoformat()] * rows,
            "_pseudonym_key_id": [key.key_id for _, key in customers],
            "_kafka_partition": pa.array([0] * rows, pa.int32()),
            "_kafka_offset": pa.array(range(first, first + rows), pa.int64()),
            "_kafka_timestamp": pa.array([int(at.timestamp() * 1000)] * rows, pa.int64()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def index_digests(s3: Any, topic: Topic) -> set[int]:
    """The digests of every version of every segment object of the table's index."""
    tables = version_tables(s3, BUCKET, topic.prefix.subject_index_prefix(), ".parquet")
    return {digest for _, table in tables for digest in table.column("digest").to_pylist()}


def test_after_a_key_rotation_rows_of_either_key_and_requests_of_before_it_are_erased_and_the_index_forgets_them(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    """Two tables of one environment: ``customer_id`` kept in clear (hashed in the scan) and pseudonymised (hashed
    by the archiver, under the key of its day); the environment's own secret rotated between the two days."""
    suffix = uuid.uuid4().hex[:8]
    rotating = rotating_secret(endpoints, suffix)
    own, old, new = rotating.endpoints, rotating.old, rotating.new
    template = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
    spec = template.spec.model_copy(update={"database": f"rotation_{suffix}", "erasure": "none"})
    clear = dataclasses.replace(template, env=f"r{suffix}", name=f"clear-{suffix}", spec=spec)
    pseudonymised = spec.model_copy(update={"pii": {"customer_id": "hmac"}})
    hashed = dataclasses.replace(clear, name=f"hashed-{suffix}", spec=pseudonymised)
    assert hashed.personal_fields.get("customer_id") == "hmac" and "customer_id" not in clear.personal_fields
    files: dict[Partition, list[tuple[DataKey, bytes]]] = {}
    clear_files: dict[Partition, list[tuple[DataKey, bytes]]] = {}
    for hour, key in ((0, old), (1, new)):
        partition = Partition(1, START.date(), hour)
        customers = [(SUBJECT, key), (f"customer-{hour}", key)]
        files[partition] = [
            (
                DataKey(hashed.prefix, partition, 0, 10 * hour, 10 * hour + 1),
                hashed_file(customers, 10 * hour, partition),
            )
        ]
        body = customer_file([SUBJECT, f"customer-{hour}"], 0, 10 * hour, partition)
        clear_files[partition] = [(DataKey(clear.prefix, partition, 0, 10 * hour, 10 * hour + 1), body)]
    put_table(endpoints, clear, clear_files)
    put_table(endpoints, hashed, files)
    s3, env = make_client(endpoints, "s3"), clear.env
    store = RequestStore(s3, BUCKET, env)
    before = new_request([old.digest(SUBJECT)], [f"{clear.database}.{clear.table}"], 1, old.key_id, datetime.now(UTC))
    store.put(before)  # digested before the rotation, carried out after it
    rotating.rotate()
    after = record_request(own, env, [hashed], SUBJECT, named=True).request
    assert {s.digest for s in after.subjects} == {new.digest(SUBJECT)}, "the receipt's subjects: the current key's"
    outcome = Eraser(spark, own, env, [clear, hashed], NO_GRACE).run()
    assert (sorted(outcome.receipts), outcome.failed) == (sorted([before.request_id, after.request_id]), {})
    receipts = store.receipts()
    assert receipts[before.request_id]["tables"][f"{clear.database}.{clear.table}"]["rows_removed"] == 2
    assert receipts[after.request_id]["tables"][f"{hashed.database}.{hashed.table}"]["rows_removed"] == 2, (
        "the row hashed under the key the rotation replaced is found by the request's digest under that key"
    )
    erased = {index.index_digest(k.digest(SUBJECT)) for k in (old, new)}
    for topic in (clear, hashed):
        kept = index_digests(s3, topic)
        assert kept and not kept & erased, f"{topic.table}: no version of the index holds an erased subject's digest"
    # a request of the first key only cannot match the second key's stored pseudonyms: the table fails, by key id
    store.put(new_request([old.digest("customer-1")], [], 1, old.key_id, datetime.now(UTC)))
    lines: list[str] = []
    failing = Eraser(spark, own, env, [clear, hashed], NO_GRACE, say=lines.append).run()
    assert failing.receipts == [] and list(failing.failed) == [f"{hashed.database}.{hashed.table}"]
    assert "key id k2" in failing.failed[f"{hashed.database}.{hashed.table}"]
    said = "\n".join(lines + list(failing.failed.values()))
    assert new.secret.hex() not in said and old.digest("customer-1") not in said


def subject_versions(s3: Any, topic: Topic) -> list[str]:
    """Every version of every data object of the table, under either root, whose rows hold ``SUBJECT``."""
    return [
        name
        for prefix in (topic.prefix.data_prefix(), topic.prefix.legacy_compacted_prefix())
        for name, table in version_tables(s3, BUCKET, prefix, ".parquet")
        if SUBJECT in table.column("customer_id").to_pylist()
    ]


def test_partitions_compacted_under_the_legacy_layout_are_found_rewritten_and_purged(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, key: PseudonymKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lake an older release compacted into ``compacted/<topic path>/`` (Glue names that output, the raw files are
    cleaned up): the erasure's index and scan find the subject there, its rewrite moves each holding partition under
    the table, and its purge leaves no version of the subject's rows under either root (issue #35, finding 8)."""
    s3, prefix = make_client(endpoints, "s3"), lake.topic.prefix
    legacy = prefix.legacy_compacted_prefix()

    def legacy_output(self: TablePrefix, partition: Partition, run_id: str) -> str:  # the layout before the move
        return f"{self.legacy_compacted_prefix()}{partition.path()}run={run_id}/"

    with monkeypatch.context() as patch, not_recorded("the lake as an older release's compactor left it"):
        patch.setattr(TablePrefix, "compaction_output_prefix", legacy_output)
        Compactor(spark, endpoints, [lake.topic], NO_GRACE).run()
        for raw in list_objects(s3, BUCKET, prefix.data_prefix(), ".parquet"):  # as its clean-up left them
            s3.delete_object(Bucket=BUCKET, Key=raw)
    assert list_objects(s3, BUCKET, prefix.data_prefix(), ".parquet") == {}
    assert len(list_objects(s3, BUCKET, legacy, ".parquet")) == HOURS
    held = subject_versions(s3, lake.topic)
    assert len(held) == 2 * len(HOLDING) and sum(v.startswith(legacy) for v in held) == len(HOLDING), (
        "noncurrent raw versions and current legacy output hold the subject (a control)"
    )
    digest = key.digest(SUBJECT)
    store = RequestStore(s3, BUCKET, lake.topic.env)
    store.put(new_request([digest], [], 1, key.key_id, datetime.now(UTC)))
    outcome = Eraser(spark, endpoints, lake.topic.env, [lake.topic], NO_GRACE).run()
    assert (len(outcome.receipts), outcome.failed) == (1, {})
    [receipt] = store.receipts().values()
    [table] = receipt["tables"].values()
    assert table["rows_removed"] == len(HOLDING)
    assert sorted(table["partitions"]) == sorted(lake.partition(h).values() for h in HOLDING)
    assert subject_versions(s3, lake.topic) == [], "a version under either root still holds the subject"
    assert index.index_digest(digest) not in index_digests(s3, lake.topic), "the index forgot the subject"
    glue = make_client(endpoints, "glue")
    rows = 0
    for hour in range(HOURS):
        values = lake.partition(hour).values()
        found = glue.get_partition(DatabaseName=lake.topic.database, TableName=lake.topic.table, PartitionValues=values)
        location = found["Partition"]["StorageDescriptor"]["Location"]
        moved = hour in HOLDING
        assert location.startswith(f"s3://{BUCKET}/{prefix.compacted_prefix() if moved else legacy}")
        rows += spark.read.parquet(location.replace("s3://", "s3a://")).count()
    assert rows == HOURS * 40 - len(HOLDING), "every other row reads the same"
