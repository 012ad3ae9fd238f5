"""What only the tests ask a schema registry: a schema by its id (the jobs read schemas by subject and version)."""

from __future__ import annotations

import httpx

from kafkalake.registry import TIMEOUT_SECONDS, RegistryClient


def schema_by_id(registry: RegistryClient, schema_id: int) -> str:
    """The schema text ``registry`` holds under ``schema_id``."""
    response = httpx.get(f"{registry.url}/schemas/ids/{schema_id}", timeout=TIMEOUT_SECONDS)
    response.raise_for_status()
    return str(response.json()["schema"])
