"""The demo's erasure, decided from the workload's plan: tombstones carry the key of an earlier record (so erasure by
key has rows to remove), the subject of the demo's request is in both tables with subject fields, what a reader must
find is the plan less what is erased; an explicit request is recorded hashed, once; a workload of an earlier shape
stops the demo with the fix."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from infra.repo import catalog_dir
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import ErasureReceipt, RequestStore, Source, TableErasure
from kafkalake.personal import MIN_KEY_BYTES, PseudonymKey
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.cli.render import erasure_lines
from kafkalake_dev.demo import DemoReport, Erasure, demo_subject, erased_records, workload_start
from kafkalake_dev.local.erase_requests import record_request
from kafkalake_dev.local.topic_workload import workload_tally
from kafkalake_dev.local.workload import plan_workload, tally

START = datetime(2026, 11, 20, 6, tzinfo=UTC)
TOPICS = load_topic_catalog(catalog_dir()).for_env("staging")
BY_NAME = {t.name: t for t in TOPICS}


def test_each_tombstone_carries_the_key_of_the_latest_good_record_before_it() -> None:
    topic = BY_NAME["customer-updated"]
    planned = plan_workload(topic, 600, start=START, hours=6)
    tombstones = [p for p in planned if p.kind == "tombstone"]
    assert tombstones
    for tombstone in tombstones:
        earlier = [p for p in planned[: tombstone.index] if p.kind == "good"]
        assert tombstone.key_index == (earlier[-1].index if earlier else None)
        if earlier:
            assert tombstone.key(topic) == earlier[-1].key(topic) == f"customer-updated-{earlier[-1].index}".encode()
    produced = tally(topic, planned)
    assert produced.tombstoned == {t.key_index for t in tombstones if t.key_index is not None}
    assert all(produced.subjects[i] == f"customer_id-{i}" for i in produced.good)


def test_a_reader_finds_the_plan_less_the_erased_records_in_their_partitions() -> None:
    produced = tally(BY_NAME["customer-updated"], plan_workload(BY_NAME["customer-updated"], 600, start=START, hours=6))
    erased = set(sorted(produced.tombstoned)[:2])
    left = produced.without(erased)
    assert left.total() == produced.expected.total() - 2
    assert produced.expected - left == Counter(produced.good[i] for i in erased)


def test_the_subject_is_one_person_in_both_tables_with_subject_fields_and_no_tombstoned_key() -> None:
    produced = {t.kafka_topic: workload_tally(t, 600, start=START, hours=6) for t in TOPICS}
    found = demo_subject(produced, TOPICS)
    assert found is not None
    index, value = found
    with_fields = [t for t in TOPICS if t.spec.subject_fields]
    assert sorted(t.name for t in with_fields) == ["customer-updated", "order-placed", "refund-issued", "ticket-opened"]
    assert all(produced[t.kafka_topic].subjects[index] == value for t in with_fields)
    erased = erased_records(TOPICS, produced, index)
    customers = produced[BY_NAME["customer-updated"].kafka_topic]
    assert erased[BY_NAME["customer-updated"].kafka_topic] == customers.tombstoned | {index}
    assert erased[BY_NAME["refund-issued"].kafka_topic] == {index}
    assert erased[BY_NAME["ticket-opened"].kafka_topic] == {index}  # a JSON Schema table
    assert erased[BY_NAME["order-placed"].kafka_topic] == {index}  # a Protobuf table, by a nested field
    assert erased[BY_NAME["card-authorized"].kafka_topic] == set(), "a table without erasure loses nothing"
    assert erased[BY_NAME["customers"].kafka_topic] == set(), "an upsert table's deletes are its changes' own"
    nobody = {k: dataclasses.replace(v, subjects={}) for k, v in produced.items()}
    assert demo_subject(nobody, TOPICS) is None


@mock_aws
def test_an_explicit_request_is_stored_hashed_and_recorded_once() -> None:
    endpoints = Endpoints("k:9092", "http://registry", "eu-west-1", "lake")
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    secret = PseudonymKey.secret_string("k1", bytes(range(MIN_KEY_BYTES)))
    boto3.client("secretsmanager", region_name="eu-west-1").create_secret(Name="pk", SecretString=secret)
    endpoints = dataclasses.replace(endpoints, pseudonym_secret_arn="pk")
    tables = [BY_NAME["customer-updated"], BY_NAME["refund-issued"]]
    first = record_request(endpoints, "staging", tables, "customer_id-42", named=True, once=True)
    again = record_request(endpoints, "staging", tables, "customer_id-42", named=True, once=True)
    other = record_request(endpoints, "staging", tables, "customer_id-43", named=True, once=True)
    assert (first.new, again.new, other.new) == (True, False, True)
    assert again.request == first.request and again.key == first.key
    stored = boto3.client("s3", region_name="eu-west-1").get_object(Bucket="lake", Key=first.key)["Body"].read()
    assert b"customer_id-42" not in stored
    [request] = [
        r
        for r in RequestStore(boto3.client("s3", region_name="eu-west-1"), "lake", "staging").requests()[0]
        if r.request_id == first.request.request_id
    ]
    assert request.source == Source.REQUEST
    assert request.tables == ("globex_staging.customer_updated", "acme_staging.refund_issued")
    assert [s.digest for s in request.subjects] == [
        PseudonymKey("k1", bytes(range(MIN_KEY_BYTES))).digest("customer_id-42")
    ]


def test_a_workload_of_an_earlier_shape_on_the_local_stack_stops_the_demo_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    first = workload_start("staging", 600, START)
    assert workload_start("staging", 600, START + timedelta(days=1)) == first, "a re-run plans the same records"
    (tmp_path / "workloads" / "staging.json").write_text(json.dumps({"start": first.isoformat(), "records": 600}))
    with pytest.raises(RuntimeError, match=r"earlier kafkalake .* `make clean`"):
        workload_start("staging", 600, START)


def test_the_demo_prints_each_receipt_by_table_with_hashed_subjects_only() -> None:
    receipt = ErasureReceipt("r-1", ["a" * 64], "2026-11-24T03:00:00+00:00", "2026-11-24T03:01:00+00:00")
    receipt.tables["globex_staging.customer_updated"] = TableErasure([["1", "2026-11-24", "01"]], 1, 0)
    receipt.tables["acme_staging.refund_issued"] = TableErasure([["1", "2026-11-24", "01"]], 1, 0)
    receipt.objects_deleted, receipt.versions_deleted = ["data/a.parquet", "data/b.parquet"], 5
    tombstones = ErasureReceipt("tombstones-x", ["b" * 64], "2026-11-24T03:00:00+00:00", "2026-11-24T03:01:00+00:00")
    tombstones.tables["globex_staging.customer_updated"] = TableErasure([], 4, 1)
    report = DemoReport("staging", "lake")
    report.erasure = Erasure("r-1", True, {}, {r.request_id: json.loads(r.to_json()) for r in (receipt, tombstones)})
    lines = list(erasure_lines(report))
    assert lines[0] == "erasure receipt r-1 (the demo's request): finished 2026-11-24T03:01:00+00:00"
    assert any("acme_staging.refund_issued" in line and "1 rows removed from 1 partitions" in line for line in lines)
    assert "  2 objects replaced, 5 object versions deleted" in lines
    assert any("4 rows removed from 0 partitions, 1 quarantined records" in line for line in lines)
    assert not any("a" * 64 in line or "b" * 64 in line for line in lines), "not even the digests are printed"
    assert list(erasure_lines(DemoReport("staging", "lake"))) == []
