"""A privacy audit on the local stack: the demo's workload, its erasure by subject and by tombstones, every job run
with Spark's event log on (EMR Serverless keeps every run's for its Spark UI). Then every version of every object in
the bucket (quarantine and restricted included), every event log, every line the jobs, the Lambdas and the demo
printed, and the Glue tables and partitions of the demo's databases are searched for what must not be there:

- each erased identifier (the demo's subject, every tombstoned Kafka key) in clear, and hashed: its pseudonym under
  the environment's key and its plain SHA-256;
- every personal field's clear value at any depth (the workload's, recomputed from its plan);
- the pseudonym key: its bytes, HMAC's two padded blocks, each as bytes, hex and base64.

Parquet objects are searched in their decoded values (their pages are compressed), every other object and file in
its bytes. A request still holding digests (a done tombstone request is watched for late rows, ``erasure_within_days``
after its receipt) holds those it matches, so the hashed forms are not looked for in the demo's tombstone requests;
they are in every other request (what remains of a done one holds receipt tokens only), and the clear forms and the
key are looked for everywhere.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore
from kafkalake.glue import table_partitions
from kafkalake.jobspec import JobRun
from kafkalake.layout import erasure_request_key, erasure_requests_prefix
from kafkalake.personal import PseudonymKey
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.demo import DemoReport, demo_subject, run_demo, workload_start
from kafkalake_dev.local.runner import JobOutcome, run_job
from kafkalake_dev.local.sandbox import isolated_env
from kafkalake_dev.local.topic_workload import workload_records
from spark_jobs.erasure.index import index_digest
from spark_jobs.erasure.purge import versions

pytestmark = [pytest.mark.stack, pytest.mark.spark]
RECORDS = 300
SHORTEST = 6
"""Clear values shorter than this are not looked for: they would match by chance (``42``)."""


def needle(text: bytes) -> re.Pattern[bytes]:
    """``text`` not inside a longer identifier: ``customer_id-4`` is not found in ``customer_id-41``."""
    return re.compile(rb"(?<![\w-])" + re.escape(text) + rb"(?![\w])")


def key_material(key: PseudonymKey) -> dict[str, re.Pattern[bytes]]:
    blocks = {"key": key.secret, "inner pad": key.pads()[0], "outer pad": key.pads()[1]}
    found: dict[str, re.Pattern[bytes]] = {}
    for name, block in blocks.items():
        found[name] = re.compile(re.escape(block))
        found[f"{name} (hex)"] = re.compile(re.escape(block.hex().encode()), re.IGNORECASE)
        found[f"{name} (base64)"] = re.compile(re.escape(base64.b64encode(block)))
    return found


def erased_identifiers(report: DemoReport, topics: list[Topic]) -> list[bytes]:
    """The demo's subject and every Kafka key a tombstone of a ``by_key`` topic erased."""
    produced = {t.topic.kafka_topic: t.produced for t in report.tables}
    subject = demo_subject(produced, topics)
    assert subject is not None, "the demo erases no subject"
    keyed = [t for t in topics if t.spec.erasure == "by_key"]  # other topics' tombstones erase nothing
    keys = [f"{t.name}-{i}".encode() for t in keyed for i in produced[t.kafka_topic].tombstoned]
    assert keys, "the demo erases no key"
    return [subject[1].encode(), *keys]


def hashed_forms(identifier: bytes, key: PseudonymKey) -> dict[str, re.Pattern[bytes]]:
    """Its pseudonym, the subject index's 60-bit prefix of it (``spark_jobs.erasure.index``), and its plain SHA-256."""
    pseudonym = key.digest_bytes(identifier)
    forms = {
        "pseudonym": pseudonym.encode(),
        "pseudonym's index prefix": str(index_digest(pseudonym)).encode(),
        "plain SHA-256": hashlib.sha256(identifier).hexdigest().encode(),
    }
    return {f"{form} of {identifier.decode()}": re.compile(re.escape(v)) for form, v in forms.items()}


def at_path(value: Any, path: str) -> Iterator[Any]:
    """The values a catalog path names in a record: ``email``, ``address.city``, ``contacts[].email`` (each element
    of an array), ``attributes{}.phone`` (each value of a map), ``tags[]``."""
    head, _, rest = path.partition(".")
    name = head.removesuffix("[]").removesuffix("{}")
    child = value.get(name) if isinstance(value, dict) else None
    if head.endswith("[]"):
        items = child if isinstance(child, list) else []
    elif head.endswith("{}"):
        items = list(child.values()) if isinstance(child, dict) else []
    else:
        items = [child]
    for item in items:
        yield from at_path(item, rest) if rest else [item]


def test_a_path_names_the_values_at_any_depth() -> None:
    record = {"email": "a@x", "contacts": [{"email": "b@x"}, {"email": "c@x"}], "attrs": {"k": {"phone": "1"}}}
    assert list(at_path(record, "contacts[].email")) == ["b@x", "c@x"]
    assert list(at_path(record, "attrs{}.phone")) == ["1"]
    assert list(at_path(record, "email")) == ["a@x"] and list(at_path(record, "missing[].x")) == []


def personal_values(topics: list[Topic], env: str) -> list[bytes]:
    """Every clear string value the workload gave a personal field, at any depth."""
    values: set[bytes] = set()
    start = workload_start(env, RECORDS, datetime.now(UTC))  # the demo's run recorded it
    for topic in topics:
        for record in workload_records(topic, RECORDS, start=start, hours=6):
            for path in topic.personal_fields:
                values |= {v.encode() for v in at_path(record, path) if isinstance(v, str)}
    values = {v for v in values if len(v) >= SHORTEST}
    assert values, "the demo's topics have no personal field with a clear value"
    return sorted(values)


def glue_texts(endpoints: Endpoints, databases: set[str]) -> Iterator[tuple[str, bytes]]:
    """(database, its tables and partitions as Glue returns them): names, locations, parameters and any statistic."""
    glue = make_client(endpoints, "glue")
    for database in sorted(databases):
        pages = glue.get_paginator("get_tables").paginate(DatabaseName=database)
        tables = [t for page in pages for t in page["TableList"]]
        partitions = [table_partitions(glue, database, t["Name"]) or [] for t in tables]
        yield database, json.dumps([tables, partitions], default=str).encode()


def object_texts(endpoints: Endpoints) -> Iterator[tuple[str, bytes]]:
    """(key@version, what it holds) for every version in the bucket: a Parquet object's decoded values, else bytes."""
    s3 = make_client(endpoints, "s3")
    for version in versions(s3, endpoints.bucket, ""):
        if version["Marker"]:
            continue
        body = s3.get_object(Bucket=endpoints.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
        data = body.read()
        name = f"{version['Key']}@{version['VersionId']}"
        if data[:4] == b"PAR1":
            table = pq.read_table(io.BytesIO(data))
            yield (
                name,
                repr(table.to_pylist()).encode()
                + b"\n"
                + b"\n".join(v for column in table.columns for v in column.to_pylist() if isinstance(v, bytes)),
            )
        else:
            yield name, data


def test_no_erased_identifier_personal_value_or_key_material_anywhere(
    local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    settings, catalog_dir, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    catalog = load_topic_catalog(catalog_dir)
    topics = catalog.for_env(settings.name)
    event_logs = tmp_path / "event-logs"
    event_logs.mkdir()
    outputs: list[str] = []

    def submit(run: JobRun, endpoints: Endpoints, *, say: Any = print) -> JobOutcome:
        outcome = run_job(run, endpoints, say=say, event_log=event_logs)
        outputs.append(outcome.stdout + outcome.stderr)
        return outcome

    report = run_demo(
        local_stack, settings, catalog, records=RECORDS, say=print, producing=lambda _t: lambda _n: None, submit=submit
    )
    printed = capfd.readouterr()
    endpoints = dataclasses.replace(local_stack, bucket=settings.bucket)
    secret = make_client(endpoints, "secretsmanager").get_secret_value(SecretId=endpoints.pseudonym_secret_arn)
    key = PseudonymKey.from_secret(secret["SecretString"], "local")
    erased = erased_identifiers(report, topics)
    personal = personal_values(topics, settings.name)
    clear = {f"erased identifier {i.decode()}": needle(i) for i in erased}
    clear |= {f"personal value {v.decode()}": needle(v) for v in personal}
    clear |= key_material(key)
    hashed = {what: pattern for i in erased for what, pattern in hashed_forms(i, key).items()}
    logs = sorted(p for p in event_logs.rglob("*") if p.is_file())
    assert len(logs) == len(outputs) >= 3, "every job run (archiver, compactor, erasure) left its event log"
    places: list[tuple[str, bytes, bool]] = [
        ("printed by the test's process", (printed.out + printed.err).encode(), True),
        *((f"printed by job run {n}", text.encode(), True) for n, text in enumerate(outputs)),
        *((f"event log {p.name}", p.read_bytes(), True) for p in logs),
    ]
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, settings.name)
    tombstone_requests = f"{erasure_requests_prefix(settings.name)}tombstones-"  # ``tombstone_request``'s ids
    watched = {erasure_request_key(settings.name, r.request_id) for r in store.requests()[0] if not r.done}
    assert watched and all(k.startswith(tombstone_requests) for k in watched), "only tombstone requests are watched"
    places += [(f"s3 {name}", data, name.split("@")[0] not in watched) for name, data in object_texts(endpoints)]
    places += [(f"glue {name}", data, True) for name, data in glue_texts(endpoints, {t.database for t in topics})]
    assert sum(name.startswith("s3 restricted/") for name, _, _ in places) > 0, "nothing quarantined restricted"
    kept = next(v for t in report.tables for i, v in t.produced.subjects.items() if v.encode() not in erased)
    controls = {  # the search finds what it looks for where it belongs: it reads what it is shown
        "a kept subject in clear in the tables": ([needle(kept.encode())], f"s3 data/{settings.name}/"),
        "some personal value's pseudonym in the tables": (
            [re.compile(key.digest(v.decode()).encode()) for v in personal],
            f"s3 data/{settings.name}/",
        ),
        "the tables' columns in Glue": ([re.compile(rb"_kafka_offset")], "glue "),
        "a tombstoned key's digest in its watched request": (
            [re.compile(key.digest_bytes(erased[1]).encode())],
            f"s3 {tombstone_requests}",
        ),
    }
    for control, (patterns, where) in controls.items():
        assert any(p.search(data) for name, data, _ in places if name.startswith(where) for p in patterns), control
    found = [
        f"{what} in {place}"
        for place, data, all_forms in places
        for what, pattern in {**clear, **(hashed if all_forms else {})}.items()
        if pattern.search(data)
    ]
    assert found == [], "\n".join(found)
