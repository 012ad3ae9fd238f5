"""A thin client for the Confluent schema-registry REST API (the wire format is in ``kafkalake.wire``).

Works against Confluent Schema Registry and any compatible one (Apicurio's ``/apis/ccompat/v7``).
"""

from __future__ import annotations

import dataclasses
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
AVRO = "AVRO"
"""The registry's ``schemaType`` of Avro schemas (its default when an answer names none)."""
TIMEOUT_SECONDS = 10.0
"""Per connect, read and write: a registry that hangs fails the call (and the topic's plan) instead of the run."""
SUBJECT_NOT_FOUND = 40401
"""The ``error_code`` of a 404 that means the registry holds no such subject (Confluent's API; Apicurio's ccompat API
answers the same). Any other 404, such as a wrong base URL's, is an error, not a missing subject."""


class RegistryError(RuntimeError):
    """The registry refused or could not be reached; the message names the URL and the answer."""


class SubjectNotFound(RegistryError):
    """The registry answered that it holds no such subject (404 with ``SUBJECT_NOT_FOUND``)."""


@dataclass(frozen=True)
class Reference:
    """An import of a registered schema, registered as a subject of its own (Protobuf, JSON Schema)."""

    name: str
    """How the schema names it: a Protobuf import path, a JSON Schema ``$ref``."""
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    schema_id: int
    schema: str
    """The table's columns as an Avro schema: the registered schema itself for Avro, its rendering for Protobuf and
    JSON Schema (``kafkalake.registered_formats.rendered``)."""
    schema_type: str = AVRO
    """The registry's ``schemaType``: ``AVRO``, ``PROTOBUF`` or ``JSON``."""
    references: tuple[Reference, ...] = ()
    decoding: Any = None
    """For Protobuf and JSON Schema, what decodes the version's records (``kafkalake.registered_formats``)."""


class RegistryClient:
    def __init__(
        self,
        url: str,
        http: httpx.Client | None = None,
        auth: tuple[str, str] | None = None,
        ca_pem: str | None = None,
    ) -> None:
        """``ca_pem``: a private CA that signed the registry's HTTPS certificate, trusted beside the system's CAs."""
        self.url = url.rstrip("/")
        verify: ssl.SSLContext | bool = True
        if ca_pem:
            verify = ssl.create_default_context()
            verify.load_verify_locations(cadata=ca_pem)
        self._http = http or httpx.Client(timeout=TIMEOUT_SECONDS, auth=auth, verify=verify)
        self._referenced: dict[tuple[str, int], RegisteredSchema] = {}
        """Referenced versions already read: a subject's version never changes once registered, and every version of
        a subject (and every topic of a run) tends to import the same few."""

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.url}{path}"
        try:
            response = self._http.request(method, url, json=body, headers={"Content-Type": CONTENT_TYPE})
        except httpx.HTTPError as exc:
            raise RegistryError(
                f"{method} {url}: the schema registry at {self.url} did not answer ({type(exc).__name__}: "
                f"{exc or 'no detail'}); check that it runs and is reachable from the job, and for an https registry "
                "whose certificate a private CA signed, that the Kafka secret's ca_pem holds that CA"
            ) from exc
        if response.status_code >= 400:
            refusal = f"{method} {url} answered {response.status_code}: {response.text[:300]}"
            if response.status_code == 404 and error_code(response.text) == SUBJECT_NOT_FOUND:
                raise SubjectNotFound(refusal)
            raise RegistryError(refusal)
        return response.json()

    def register(
        self, subject: str, schema: str, schema_type: str = "AVRO", references: Sequence[Reference] = ()
    ) -> int:
        """Register (idempotently) and return the schema id."""
        body: dict[str, Any] = {"schema": schema, "schemaType": schema_type}
        if references:
            body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in references]
        return int(self._call("POST", f"{subject_path(subject)}/versions", body)["id"])

    def versions(self, subject: str, message: str | None = None) -> list[RegisteredSchema]:
        """Every version of a subject, oldest first, looked up by its name (a registry's listing of all subjects
        may be capped or paged), each with its table's columns (``RegisteredSchema.schema``; of a Protobuf schema,
        message ``message``'s, else the file's first); empty when the registry answers that it holds no such
        subject, ``RegistryError`` for any other failure."""
        try:
            numbers = self._call("GET", f"{subject_path(subject)}/versions")
        except SubjectNotFound:
            return []
        return [self._with_columns(self.version(subject, int(number)), message) for number in numbers]

    def _with_columns(self, found: RegisteredSchema, message: str | None) -> RegisteredSchema:
        """``found`` (as the registry holds it) with its table's columns and decoding."""
        if found.schema_type == AVRO:
            return found
        # imported here: protoc and the protobuf runtime are needed only where such schemas are read (the Lambdas
        # read none)
        from kafkalake.registered_formats import rendered

        texts = json.dumps(self.referenced_texts(found.references), sort_keys=True)
        columns, decoding = rendered(found.schema_type, found.schema, texts, message)
        return dataclasses.replace(found, schema=columns, decoding=decoding)

    def version(self, subject: str, number: int) -> RegisteredSchema:
        """One version of a subject as the registry holds it (``schema`` the registered text, not yet rendered)."""
        item = self._call("GET", f"{subject_path(subject)}/versions/{number}")
        references = tuple(
            Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in item.get("references") or ()
        )
        schema_type = str(item.get("schemaType") or AVRO)
        return RegisteredSchema(
            subject, int(item["version"]), int(item["id"]), str(item["schema"]), schema_type, references
        )

    def referenced_texts(self, references: Sequence[Reference]) -> dict[str, str]:
        """The schemas ``references`` name, and theirs, by the name they are imported under."""
        found: dict[str, str] = {}
        pending = list(references)
        while pending:
            reference = pending.pop()
            if reference.name in found:
                continue
            at = (reference.subject, reference.version)
            item = self._referenced.get(at) or self._referenced.setdefault(at, self.version(*at))
            found[reference.name] = item.schema
            pending.extend(item.references)
        return found


def subject_path(subject: str) -> str:
    """The subject's resource path, its name quoted whole (a ``/`` in it is not a path separator)."""
    return f"/subjects/{quote(subject, safe='')}"


def error_code(body: str) -> int | None:
    """The Confluent ``error_code`` of an error answer's body, if it has one."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    code = parsed.get("error_code") if isinstance(parsed, dict) else None
    return code if isinstance(code, int) else None


def value_subject(kafka_topic: str) -> str:
    """The TopicNameStrategy subject for a topic's values."""
    return f"{kafka_topic}-value"


def key_subject(kafka_topic: str) -> str:
    """The TopicNameStrategy subject for a topic's keys."""
    return f"{kafka_topic}-key"
