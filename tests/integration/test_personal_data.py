"""Personal data on the way in, on the local stack, through the archiver's job-run specification (spark-submit, the
key read from the local Secrets Manager by the job): two topics share customer ids; the Parquet holds their keyed
hashes, which still join; the dropped field is gone, the masked one masked; no object, log line or metric of the
run holds a clear value, except the raw quarantined records under the restricted prefix; the other topic keeps
offsets only of its quarantined records. A schema version the registry holds and the catalog lacks (in process,
``archive_topic``): a new field it tags is hashed, a version with a field no one tagged is held in the restricted
quarantine (whatever the topic's mode) until the catalog declares it."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from infra.repo import environments_file
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import load_environments
from kafkalake.job_runs import archiver_run
from kafkalake.metrics import ENVIRONMENT_DIMENSION, NAMESPACE
from kafkalake.personal import KEY_ID_COLUMN, Keyring, PseudonymKey, load_key
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.undeclared import UNDECLARED_VERSION
from kafkalake.wire import encode
from kafkalake_dev.local.endpoints import LOCAL_RESTRICTED_KEY_ALIAS
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.runner import JobOutcome, LocalAssets, run_job
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic
from tests.integration.archive_helpers import archive_topic, audit_problems, committed_and_end, read_back

pytestmark = [pytest.mark.stack, pytest.mark.spark]
BUCKET = "kafkalake-personal-tests"
ORDERS = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "created_at", "type": "string"},
        {"name": "card_pan", "type": "string"},
        {
            "name": "customer",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Customer",
                    "fields": [
                        {"name": "id", "type": "string", "confluent:tags": ["PII"]},
                        {"name": "phone", "type": ["null", "string"], "default": None, "pii": "drop"},
                    ],
                },
            ],
            "default": None,
        },
    ],
}
VISITS = {
    "type": "record",
    "name": "Visit",
    "fields": [
        {"name": "visit_id", "type": "string"},
        {"name": "visited_at", "type": "string"},
        {"name": "customer_id", "type": "string", "pii": True},
        {"name": "email", "type": "string"},
    ],
}
CUSTOMERS, ORDER_COUNT, VISIT_COUNT, POISON = 5, 30, 20, 3


class Lake:
    """The two topics of a fresh environment, what was produced to them in clear, and the archiver's run."""

    def __init__(self, root: Path, endpoints: Endpoints) -> None:
        self.env, self.endpoints, suffix = f"t{uuid.uuid4().hex[:10]}", endpoints, uuid.uuid4().hex[:8]
        folder = root / "catalog" / "acme" / "shop" / self.env
        folder.mkdir(parents=True)
        topics = {
            "orders": (ORDERS, "pii: {card_pan: mask_last4}\ntime_fields: [{path: created_at, format: iso8601}]\n"),
            "visits": (VISITS, "value_format: json\nquarantine: offsets_only\npii: {email: hmac}\n"),
        }
        for name, (schema, body) in topics.items():
            (folder / f"{name}.yaml").write_text(f"kafka_topic: test.pii.{name}.{suffix}\n{body}")
            (folder / f"{name}.v1.avsc").write_text(json.dumps(schema))
        self.catalog = load_topic_catalog(root / "catalog")
        self.orders, self.visits = (self.catalog.get(name, self.env) for name in topics)
        self.customers = [f"cust-{suffix}-{i}" for i in range(CUSTOMERS)]
        self.clear: dict[str, list[str]] = {"customer": list(self.customers), "phone": [], "pan": [], "email": []}
        self.order_customer: dict[str, str | None] = {}
        self.poison: list[bytes] = []

    def produce(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.endpoints.kafka_bootstrap})
        for topic in (self.orders, self.visits):
            ensure_topic(admin, topic.kafka_topic, 3)
        schema_id = RegistryClient(self.endpoints.schema_registry_url).register(
            value_subject(self.orders.kafka_topic), json.dumps(ORDERS)
        )
        producer = Producer({"bootstrap.servers": self.endpoints.kafka_bootstrap})
        for i in range(ORDER_COUNT):
            order_id, pan, phone = f"order-{i}", f"4929{secrets.randbelow(10**12):012d}", f"+44770{i:06d}{i}"
            customer = None if i == 0 else {"id": self.customers[i % CUSTOMERS], "phone": phone}
            self.order_customer[order_id] = customer["id"] if customer else None
            self.clear["pan"].append(pan)
            self.clear["phone"] += [phone] if customer else []
            value = {"order_id": order_id, "created_at": f"2026-11-20T0{i % 5}:15:00Z", "card_pan": pan}
            producer.produce(
                self.orders.kafka_topic, encode(schema_id, json.dumps(ORDERS), {**value, "customer": customer})
            )
        for i in range(VISIT_COUNT):
            email = f"visitor-{i}-{uuid.uuid4().hex[:6]}@example.com"
            self.clear["email"].append(email)
            visit = {"visit_id": f"visit-{i}", "visited_at": "2026-11-20T08:00:00Z", "email": email}
            producer.produce(
                self.visits.kafka_topic, json.dumps({**visit, "customer_id": self.customers[i % CUSTOMERS]}).encode()
            )
        for i in range(POISON):
            self.poison.append(f"\x42{self.customers[i]} +44770999{i}".encode())
            producer.produce(self.orders.kafka_topic, self.poison[-1], partition=i)
            producer.produce(self.visits.kafka_topic, f'{{"customer_id": "{self.customers[i]}"'.encode(), partition=i)
        producer.flush(30)

    def archive(self, root: Path) -> JobOutcome:
        """The archiver's job-run specification for the environment, run with spark-submit (once the broker, which
        may have just started, coordinates the topics' consumer groups)."""
        for topic in (self.orders, self.visits):
            for attempt in range(10):
                try:
                    committed_and_end(self.endpoints, topic)
                    break
                except KafkaException:
                    if attempt == 9:
                        raise
                    time.sleep(1)
        settings = load_environments(environments_file())["staging"].model_copy(
            update={"name": self.env, "bucket": BUCKET}
        )
        assets = LocalAssets.build(root / "assets", self.catalog.root)
        return run_job(archiver_run(settings, assets.artifacts), self.endpoints, say=lambda _line: None)

    def objects(self) -> dict[str, str]:
        """Every object of the environment as text: Parquet decoded to its values, the rest as it is."""
        s3 = make_client(self.endpoints, "s3")
        roots = ("data", "quarantine", "state", "restricted/quarantine")
        found = {}
        for key in (k for root in roots for k in list_objects(s3, BUCKET, f"{root}/{self.env}/")):
            if key.endswith(".parquet"):
                found[key] = json.dumps(self.table(key).to_pylist(), default=repr)
            else:
                found[key] = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode(errors="replace")
        return found

    def table(self, key: str) -> pa.Table:
        body = make_client(self.endpoints, "s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
        return pq.read_table(io.BytesIO(body))

    def metrics(self) -> str:
        """Every metric the run published (its name and dimensions; the values are numbers)."""
        pages = make_client(self.endpoints, "cloudwatch").get_paginator("list_metrics").paginate(Namespace=NAMESPACE)
        mine = {"Name": ENVIRONMENT_DIMENSION, "Value": self.env}
        return json.dumps([m for page in pages for m in page["Metrics"] if mine in m["Dimensions"]])


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    ensure_pseudonym_key(make_client(local_stack, "secretsmanager"))
    return with_bucket(local_stack, BUCKET)


@pytest.fixture(scope="module")
def key(endpoints: Endpoints) -> PseudonymKey:
    return load_key(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)


@pytest.fixture(scope="module")
def lake(endpoints: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> tuple[Lake, JobOutcome]:
    root = tmp_path_factory.mktemp("personal")
    lake = Lake(root, endpoints)
    lake.produce()
    outcome = lake.archive(root)
    assert outcome.returncode == 0, outcome.output
    return lake, outcome


def reference(key: PseudonymKey, value: str) -> str:
    return hmac.new(key.secret, value.encode(), hashlib.sha256).hexdigest()


def test_hashed_dropped_and_masked_fields_and_the_pseudonyms_still_join(
    spark: SparkSession, lake: tuple[Lake, JobOutcome], key: PseudonymKey
) -> None:
    found, _ = lake
    orders = read_back(spark, found.endpoints, found.orders)
    assert orders.schema["customer"].dataType.simpleString() == "struct<id:string>", "phone dropped"
    rows = {r["order_id"]: r for r in orders.collect()}
    assert len(rows) == ORDER_COUNT
    for order_id, customer in found.order_customer.items():
        row = rows[order_id]
        assert row["customer"] == (None if customer is None else (reference(key, customer),))
        assert row["card_pan"] == "*" * 12 + found.clear["pan"][int(order_id.split("-")[1])][-4:]
        assert row[KEY_ID_COLUMN] == key.key_id
    visits = read_back(spark, found.endpoints, found.visits)
    assert {r["customer_id"] for r in visits.collect()} == {reference(key, c) for c in found.customers}
    assert {r["email"] for r in visits.collect()} == {reference(key, e) for e in found.clear["email"]}
    joined = orders.join(visits, F.col("customer.id") == F.col("customer_id")).count()
    per_customer = {c: list(found.order_customer.values()).count(c) for c in found.customers}
    assert joined == sum(per_customer[found.customers[i % CUSTOMERS]] for i in range(VISIT_COUNT)) > 0


def test_no_object_log_line_or_metric_holds_a_clear_value_but_the_restricted_quarantine(
    lake: tuple[Lake, JobOutcome],
) -> None:
    found, outcome = lake
    objects = found.objects()
    restricted = {k: v for k, v in objects.items() if k.startswith(found.orders.quarantine_prefix())}
    assert restricted and found.orders.quarantine_prefix().startswith("restricted/quarantine/")
    assert not [k for k in objects if k.startswith(found.orders.prefix.quarantine_prefix())], "none in plain"
    raw = [value for k in restricted for value in found.table(k).column("_raw_value").to_pylist()]
    assert sorted(raw) == sorted(found.poison)
    offsets_only = [
        r for k, v in objects.items() if k.startswith(found.visits.quarantine_prefix()) for r in json.loads(v)
    ]
    assert [sorted(r) for r in offsets_only] == [
        ["_error", "_kafka_offset", "_kafka_partition", "_kafka_timestamp", "_schema_id"]
    ] * POISON
    places = {
        **{k: v for k, v in objects.items() if k not in restricted},
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "metrics": found.metrics(),
    }
    assert len(places) > 5 and any("/receipts/" in k for k in places) and '"Topic"' in places["metrics"]
    clear = [value for values in found.clear.values() for value in values]
    leaks = sorted({(where, value) for where, text in places.items() for value in clear if value in text})
    assert leaks == []


def test_the_archiver_writes_the_restricted_quarantine_with_the_restricted_key(lake: tuple[Lake, JobOutcome]) -> None:
    """As in AWS: restricted quarantine objects with SSE-KMS and the restricted key (the key the local stack made in
    moto's KMS, its ARN handed on in the endpoints); every other object with the bucket's default encryption (none
    locally: docs/testing.md says why)."""
    found, _ = lake
    s3, kms = make_client(found.endpoints, "s3"), make_client(found.endpoints, "kms")
    restricted_key = kms.describe_key(KeyId=LOCAL_RESTRICTED_KEY_ALIAS)["KeyMetadata"]["Arn"]
    assert found.endpoints.restricted_key_arn == restricted_key
    encryption = {
        key: (head.get("ServerSideEncryption"), head.get("SSEKMSKeyId"))
        for key in found.objects()
        for head in [s3.head_object(Bucket=BUCKET, Key=key)]
    }
    restricted = {k for k in encryption if k.startswith(found.orders.quarantine_prefix())}
    assert restricted and {encryption[k] for k in restricted} == {("aws:kms", restricted_key)}
    assert {encryption[k] for k in encryption.keys() - restricted} == {(None, None)}


SIGNUP: dict[str, Any] = {
    "type": "record",
    "name": "Signup",
    "fields": [
        {"name": "signup_id", "type": "string"},
        {"name": "signed_up_at", "type": "string"},
        {"name": "customer_id", "type": "string", "pii": True},
    ],
}
TAGGED = {**SIGNUP, "fields": [*SIGNUP["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
TAGGED["fields"][-1]["confluent:tags"] = ["PII"]
UNTAGGED = {**TAGGED, "fields": [*TAGGED["fields"], {"name": "referrer", "type": ["null", "string"], "default": None}]}
PER_VERSION = 6


class Signups:
    """A topic whose catalog declares v1 only (quarantine: offsets_only), and the registry's v2 (a new field tagged
    PII) and v3 (a new field no one tagged)."""

    def __init__(self, root: Path, endpoints: Endpoints) -> None:
        self.endpoints, suffix = endpoints, uuid.uuid4().hex[:8]
        self.folder = root / "catalog" / "acme" / "shop" / f"t{suffix}"
        self.folder.mkdir(parents=True)
        (self.folder / "signups.yaml").write_text(f"kafka_topic: test.pii.signups.{suffix}\nquarantine: offsets_only\n")
        (self.folder / "signups.v1.avsc").write_text(json.dumps(SIGNUP))
        self.root = root / "catalog"
        self.topic = load_topic_catalog(self.root).get("signups", f"t{suffix}")
        registry = RegistryClient(endpoints.schema_registry_url)
        ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), self.topic.kafka_topic, 3)
        subject = value_subject(self.topic.kafka_topic)
        self.ids = [registry.register(subject, json.dumps(s)) for s in (SIGNUP, TAGGED, UNTAGGED)]
        self.clear: dict[str, list[str]] = {"customer": [], "email": [], "referrer": []}
        self.produced: dict[int, list[bytes]] = {1: [], 2: [], 3: []}

    def produce(self, version: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": self.endpoints.kafka_bootstrap})
        schema = (SIGNUP, TAGGED, UNTAGGED)[version - 1]
        for _ in range(count):
            tag = uuid.uuid4().hex[:10]
            record = {"signup_id": f"s-{tag}", "signed_up_at": "2026-11-20T08:00:00Z", "customer_id": f"cust-{tag}"}
            self.clear["customer"].append(record["customer_id"])
            if version > 1:
                record["email"] = f"ann-{tag}@example.com"
                self.clear["email"].append(record["email"])
            if version > 2:
                record["referrer"] = f"friend-{tag}"
                self.clear["referrer"].append(record["referrer"])
            value = encode(self.ids[version - 1], json.dumps(schema), record)
            self.produced[version].append(value)
            producer.produce(self.topic.kafka_topic, value)
        assert producer.flush(30) == 0

    def tables(self, prefix: str) -> dict[str, pa.Table]:
        s3 = make_client(self.endpoints, "s3")
        found = {}
        for key in list_objects(s3, BUCKET, prefix, ".parquet"):
            found[key] = pq.read_table(io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
        return found


def test_a_version_the_catalog_lacks_is_hashed_by_its_tags_or_held_restricted_until_declared(
    spark: SparkSession, endpoints: Endpoints, key: PseudonymKey, tmp_path: Path
) -> None:
    signups = Signups(tmp_path, endpoints)
    for version in (1, 2, 3):
        signups.produce(version, PER_VERSION)
    said: list[str] = []
    summary = archive_topic(spark, endpoints, signups.topic, keys=Keyring(key), say=said.append)
    topic = signups.topic
    assert (summary.read, summary.written, summary.held) == (3 * PER_VERSION, 2 * PER_VERSION, PER_VERSION)
    assert summary.quarantine_by_reason == {UNDECLARED_VERSION: PER_VERSION}

    data = signups.tables(topic.prefix.data_prefix())
    assert {k.split("/")[-4] for k in data} == {"schema_version=1", "schema_version=2"}, "v3 never in the table"
    tagged = [r for k, t in data.items() if "schema_version=2" in k for r in t.to_pylist()]
    assert sorted(r["email"] for r in tagged) == sorted(reference(key, e) for e in signups.clear["email"][:PER_VERSION])
    assert {r[KEY_ID_COLUMN] for r in tagged} == {key.key_id}

    held = signups.tables(topic.prefix.quarantine_prefix(restricted=True))
    rows = [r for t in held.values() for r in t.to_pylist()]
    assert sorted(r["_raw_value"] for r in rows) == sorted(signups.produced[3])
    assert {(r["_error"], r["_schema_id"]) for r in rows} == {(UNDECLARED_VERSION, signups.ids[2])}
    s3 = make_client(endpoints, "s3")
    restricted_key = make_client(endpoints, "kms").describe_key(KeyId=LOCAL_RESTRICTED_KEY_ALIAS)["KeyMetadata"]
    for name in held:
        head = s3.head_object(Bucket=BUCKET, Key=name)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", restricted_key["Arn"])
    assert not signups.tables(topic.prefix.quarantine_prefix()), "nothing else was quarantined"

    places = {"said": "\n".join(said), **{k: json.dumps(t.to_pylist(), default=repr) for k, t in data.items()}}
    receipts = list_objects(s3, BUCKET, topic.prefix.receipts_prefix())
    places |= {k: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode() for k in receipts}
    clear = [value for values in signups.clear.values() for value in values]
    assert sorted({(where, v) for where, text in places.items() for v in clear if v in text}) == []
    assert any(UNDECLARED_VERSION in line and "referrer" in line for line in said)
    assert audit_problems(endpoints, topic) == []

    (signups.folder / "signups.v2.avsc").write_text(json.dumps(TAGGED))
    (signups.folder / "signups.v3.avsc").write_text(json.dumps(UNTAGGED))
    declared = load_topic_catalog(signups.root).get("signups", topic.env)
    signups.produce(3, PER_VERSION)
    after = archive_topic(spark, endpoints, declared, keys=Keyring(key), say=said.append)
    assert (after.written, after.held) == (PER_VERSION, 0)
    later = [
        r
        for k, t in signups.tables(topic.prefix.data_prefix()).items()
        if "schema_version=3" in k
        for r in t.to_pylist()
    ]
    assert sorted(r["email"] for r in later) == sorted(reference(key, e) for e in signups.clear["email"][-PER_VERSION:])
