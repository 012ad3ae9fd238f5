"""The registry client against a stub registry: a subject is looked up by its name, not found in the listing of all
subjects (which a registry may cap, as Apicurio's does at 1,000), and only the registry's own "no such subject"
(404, error code 40401) means missing: any other failure is an error."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from infra.repo import catalog_dir
from kafkalake.drift import REGISTRY_LOOKUPS, cluster_view
from kafkalake.registry import RegisteredSchema, RegistryClient, RegistryError, value_subject
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import encode
from kafkalake_dev.onboarding.importer import Proposal, Sample, propose
from tests.unit.test_onboarding import AVRO, NAME

URL = "http://registry:8081/apis/ccompat/v7"
LISTING_CAP = 1_000
OTHERS = [f"bench.fleet.t{i:04}-value" for i in range(LISTING_CAP + 200)]


class StubRegistry:
    """A Confluent-compatible registry holding ``subjects`` (each one version of ``AVRO``), whose ``/subjects``
    lists only the first ``LISTING_CAP`` in name order; ``answer`` replaces every answer when set."""

    def __init__(self, subjects: list[str], answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.subjects, self.answer = sorted(subjects), answer
        self.paths: list[bytes] = []

    def client(self) -> RegistryClient:
        return RegistryClient(URL, http=httpx.Client(transport=httpx.MockTransport(self.handle)))

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.raw_path)
        if self.answer is not None:
            return self.answer(request)
        path = request.url.path.removeprefix("/apis/ccompat/v7")
        if path == "/subjects":
            return httpx.Response(200, json=self.subjects[:LISTING_CAP])
        parts = path.split("/")  # "", "subjects", name, "versions"[, number]
        if parts[2] not in self.subjects:
            return httpx.Response(404, json={"error_code": 40401, "message": f"Subject '{parts[2]}' not found."})
        if len(parts) == 4:
            return httpx.Response(200, json=[1])
        return httpx.Response(200, json={"subject": parts[2], "version": 1, "id": 7, "schema": AVRO})


def test_onboarding_finds_a_subject_the_registry_listing_leaves_out(tmp_path: Path) -> None:
    """The topic's subject sorts after the listing's first 1,000: it is still found, and the import proposes the
    topic instead of flagging "no value subject in the registry"."""
    unregistered = "staging.acme.sales.refunds"
    registry = StubRegistry([*OTHERS, value_subject(NAME.kafka_topic)])
    listed = registry.handle(httpx.Request("GET", f"{URL}/subjects")).json()
    assert len(listed) == LISTING_CAP and value_subject(NAME.kafka_topic) not in listed

    view = cluster_view([NAME.kafka_topic, unregistered], registry.client())

    assert view.topics == (NAME.kafka_topic, unregistered)
    assert view.versions == {NAME.kafka_topic: (RegisteredSchema(value_subject(NAME.kafka_topic), 1, 7, AVRO),)}
    framed = Sample([encode(7, AVRO, {"id": f"o{i}", "placed_at": 1_763_600_000_000}) for i in range(3)], 3)
    found = propose(
        NAME,
        env="staging",
        root=tmp_path,
        catalog=load_topic_catalog(catalog_dir()),
        registered=view.versions.get(NAME.kafka_topic, ()),
        sample=framed,
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.AVRO


def test_subjects_are_looked_up_several_at_once() -> None:
    """Each lookup waits until ``REGISTRY_LOOKUPS`` are under way together: one after another, the first would wait
    alone and the barrier break."""
    registry = StubRegistry([value_subject(f"staging.acme.t{i}") for i in range(2 * REGISTRY_LOOKUPS)])
    together = threading.Barrier(REGISTRY_LOOKUPS, timeout=10)

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/versions"):
            together.wait()
        return registry.handle(request)

    client = RegistryClient(URL, http=httpx.Client(transport=httpx.MockTransport(handle)))
    view = cluster_view([f"staging.acme.t{i}" for i in range(2 * REGISTRY_LOOKUPS)], client)
    assert len(view.versions) == 2 * REGISTRY_LOOKUPS


def refuse(status: int, body: str) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, text=body)


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (refuse(500, '{"error_code": 50001, "message": "store failed"}'), "answered 500"),
        (refuse(404, '{"title": "Could not find resource for full path", "status": 404}'), "answered 404"),
        (refuse(404, "<html>Not Found</html>"), "answered 404"),
        (refuse(404, '{"error_code": 40402, "message": "Version not found."}'), "answered 404"),
        (unreachable, "did not answer (ConnectError: connection refused)"),
    ],
    ids=["server-error", "wrong-base-url", "not-json", "other-error-code", "unreachable"],
)
def test_a_registry_failure_is_an_error_never_a_missing_subject(
    answer: Callable[[httpx.Request], httpx.Response], says: str
) -> None:
    registry = StubRegistry([], answer)
    with pytest.raises(RegistryError, match=re.escape(says)) as raised:
        registry.client().versions(value_subject(NAME.kafka_topic))
    assert type(raised.value) is RegistryError  # not its SubjectNotFound
    assert f"GET {URL}/subjects/{value_subject(NAME.kafka_topic)}/versions" in str(raised.value)


def test_subject_names_are_quoted_whole() -> None:
    registry = StubRegistry([])
    assert registry.client().versions("acme/orders value:v1") == []
    assert registry.paths == [b"/apis/ccompat/v7/subjects/acme%2Forders%20value%3Av1/versions"]


def test_a_reference_is_read_once_however_many_versions_and_calls_import_it() -> None:
    """Two Protobuf versions importing the same registered file, looked up twice: the file is read once (a subject's
    version never changes once registered)."""
    address = 'syntax = "proto3"; package a; message Address { string city = 1; }'
    order = 'syntax = "proto3"; package o; import "a.proto"; message Order {{ a.Address to = 1; {extra} }}'
    texts = {1: order.format(extra=""), 2: order.format(extra="string id = 2;")}
    reads: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/apis/ccompat/v7")
        reads.append(path)
        if path == "/subjects/a.proto/versions/1":
            found = {"subject": "a.proto", "version": 1, "id": 1, "schema": address, "schemaType": "PROTOBUF"}
            return httpx.Response(200, json=found)
        if path == "/subjects/orders-value/versions":
            return httpx.Response(200, json=[1, 2])
        number = int(path.rsplit("/", 1)[1])
        reference = [{"name": "a.proto", "subject": "a.proto", "version": 1}]
        version = {"subject": "orders-value", "version": number, "id": 10 + number, "schema": texts[number]}
        return httpx.Response(200, json={**version, "schemaType": "PROTOBUF", "references": reference})

    client = RegistryClient(URL, http=httpx.Client(transport=httpx.MockTransport(handle)))
    first, again = client.versions("orders-value"), client.versions("orders-value")
    assert [v.schema_type for v in first] == ["PROTOBUF", "PROTOBUF"] and first == again
    assert '"name": "to"' in first[0].schema and '"name": "id"' in first[1].schema
    assert reads.count("/subjects/a.proto/versions/1") == 1
