"""A thin client for the Confluent schema-registry REST API (the wire format is in ``kafkalake.wire``).

Works against Confluent Schema Registry and any compatible one (Apicurio's ``/apis/ccompat/v7``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_SECONDS = 10.0
"""Per connect, read and write: a registry that hangs fails the call (and the topic's plan) instead of the run."""


class RegistryError(RuntimeError):
    """The registry refused or could not be reached; the message names the URL and the answer."""


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    schema_id: int
    schema: str


class RegistryClient:
    def __init__(self, url: str, http: httpx.Client | None = None, auth: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = http or httpx.Client(timeout=TIMEOUT_SECONDS, auth=auth)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.url}{path}"
        try:
            response = self._http.request(method, url, json=body, headers={"Content-Type": CONTENT_TYPE})
        except httpx.HTTPError as exc:
            raise RegistryError(
                f"{method} {url}: the schema registry at {self.url} did not answer ({type(exc).__name__}: "
                f"{exc or 'no detail'}); check that it runs and is reachable from the job"
            ) from exc
        if response.status_code >= 400:
            raise RegistryError(f"{method} {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def register(self, subject: str, schema: str) -> int:
        """Register (idempotently) and return the schema id."""
        return int(self._call("POST", f"/subjects/{subject}/versions", {"schema": schema, "schemaType": "AVRO"})["id"])

    def subjects(self) -> list[str]:
        """Every subject the registry holds."""
        return [str(s) for s in self._call("GET", "/subjects")]

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of a subject, oldest first (empty when the subject does not exist)."""
        try:
            numbers = self._call("GET", f"/subjects/{subject}/versions")
        except RegistryError as exc:
            if " answered 404" in str(exc):
                return []
            raise
        found = []
        for number in numbers:
            item = self._call("GET", f"/subjects/{subject}/versions/{number}")
            found.append(RegisteredSchema(subject, int(item["version"]), int(item["id"]), str(item["schema"])))
        return found


def value_subject(kafka_topic: str) -> str:
    """The TopicNameStrategy subject for a topic's values."""
    return f"{kafka_topic}-value"
