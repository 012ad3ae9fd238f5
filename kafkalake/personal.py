"""Personal data: which fields hold it, how each is protected, and the keyed hash that stands in for a value.

Fields are declared personal where producers already describe their data, in the Avro schema (Confluent's
``"confluent:tags": ["PII"]`` on a field, or a ``"pii"`` attribute: ``true`` for the default action, or an action
name), and the catalog file may override or add (``pii: {customer.email: hmac, card.pan: mask_last4}``).

The keyed hash is HMAC-SHA256 under a per-environment key kept in Secrets Manager: deterministic, so pseudonyms
still join across tables, and an erasure request's subject is stored as the same hash, never in clear. The
secret is a JSON object ``{"key_id": "<id>", "key": "<base64, at least 32 bytes>"}``; the key id travels with
every pseudonym so that rotated keys can be told apart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

HASH_BLOCK_BYTES = 64
"""SHA-256's block size: HMAC pads the key to it."""
MIN_KEY_BYTES = 32
PII_TAG = "PII"
CONFLUENT_TAGS = "confluent:tags"
PII_ATTRIBUTE = "pii"
KEY_ID_COLUMN = "_pseudonym_key_id"
"""The column beside a table's pseudonyms naming the key that made them, so pseudonyms of a rotated key can be told
apart from the new key's."""


class PiiAction(StrEnum):
    """What the archiver does with a personal field's value before it reaches Parquet."""

    HMAC = "hmac"
    """The keyed hash (hex): deterministic, joinable, not reversible without the key."""
    DROP = "drop"
    """The field is left out."""
    MASK_LAST4 = "mask_last4"
    """All but the last four characters replaced by ``*``."""


SUGGESTIVE_NAMES = (
    "email",
    "phone",
    "mobile",
    "iban",
    "name",
    "address",
    "street",
    "postcode",
    "birth",
    "passport",
    "ssn",
    "national_id",
    "tax_id",
    "ip_address",
)
"""Parts of field names that often hold personal data: ``catalog validate`` suggests such untagged fields, never
protects them on its own."""

DEFAULT_ACTION = PiiAction.HMAC
"""The action for a field tagged in the schema without naming one."""


def needs_key(fields: dict[str, PiiAction]) -> bool:
    """Whether protecting ``fields`` takes the environment's key (some field is hashed)."""
    return PiiAction.HMAC in fields.values()


class QuarantineMode(StrEnum):
    """What becomes of an undecodable record's raw bytes (its key and value, personal data included)."""

    PLAIN = "plain"
    """Kept under the quarantine prefix, as for any topic: only for topics without personal fields."""
    RESTRICTED = "restricted"
    """Kept under the restricted prefix (``kafkalake.layout``): its own KMS key, a short retention. The default for
    topics with personal fields."""
    OFFSETS_ONLY = "offsets_only"
    """Not kept: the quarantine object holds the record's offsets, Kafka time, schema id and error only."""


class KeyInvalid(ValueError):
    """The pseudonym key's secret is missing a field or holds a key kafkalake cannot use."""


@dataclass(frozen=True)
class PseudonymKey:
    """One environment's HMAC key; its bytes never appear in ``repr`` or messages."""

    key_id: str
    secret: bytes = field(repr=False)

    def digest(self, value: str) -> str:
        """The keyed hash of ``value`` (its UTF-8 bytes) as 64 lower-case hex characters."""
        return self.digest_bytes(value.encode())

    def digest_bytes(self, value: bytes) -> str:
        """The keyed hash of raw bytes (a Kafka key), as ``spark_jobs.keyed_hash`` takes it of a binary column."""
        return hmac.new(self.secret, value, hashlib.sha256).hexdigest()

    def pads(self) -> tuple[bytes, bytes]:
        """HMAC's inner and outer padded keys (RFC 2104): key material a leak check looks for beside the key itself
        (no job computes them: the hash is ``spark_jobs.keyed_hash``'s JVM function)."""
        block = self.secret if len(self.secret) <= HASH_BLOCK_BYTES else hashlib.sha256(self.secret).digest()
        block = block.ljust(HASH_BLOCK_BYTES, b"\x00")
        return bytes(b ^ 0x36 for b in block), bytes(b ^ 0x5C for b in block)

    @classmethod
    def from_secret(cls, secret_string: str, source: str) -> PseudonymKey:
        """Parse the secret's JSON; ``source`` (its ARN or name) is named in every error, the key never."""
        try:
            fields = json.loads(secret_string)
            key_id, encoded = fields["key_id"], fields["key"]
            secret = base64.b64decode(encoded, validate=True)
        except (ValueError, TypeError, KeyError, binascii.Error) as exc:
            raise KeyInvalid(
                f"secret {source} must be a JSON object with 'key_id' and 'key' (base64); {type(exc).__name__}: "
                "store it as documented in kafkalake.personal"
            ) from None
        if not isinstance(key_id, str) or not key_id:
            raise KeyInvalid(f"secret {source}: 'key_id' must be a non-empty string")
        if len(secret) < MIN_KEY_BYTES:
            raise KeyInvalid(f"secret {source}: the key has {len(secret)} bytes; use at least {MIN_KEY_BYTES}")
        return cls(key_id, secret)

    @staticmethod
    def secret_string(key_id: str, secret: bytes) -> str:
        """The secret's JSON for a key, as ``from_secret`` reads it (to create or rotate one)."""
        return json.dumps({"key_id": key_id, "key": base64.b64encode(secret).decode()})


def load_key(secrets: Any, secret_arn: str | None) -> PseudonymKey:
    """The key in ``secret_arn``, read with the injected Secrets Manager client."""
    if not secret_arn:
        raise KeyInvalid(
            "no pseudonym key configured: set pseudonym_secret_arn for the environment in environments.yaml "
            "(KAFKALAKE_PSEUDONYM_SECRET_ARN for the jobs)"
        )
    return PseudonymKey.from_secret(secrets.get_secret_value(SecretId=secret_arn)["SecretString"], secret_arn)


def schema_fields(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every field of a record schema with its dotted path, nested records (also inside ``[null, record]``
    unions) included, parents before their children."""
    yield from _walk(schema, "")


def _walk(schema: Any, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, list):
        for branch in schema:
            yield from _walk(branch, prefix)
    elif isinstance(schema, dict) and schema.get("type") == "record":
        for avro_field in schema.get("fields", []):
            path = f"{prefix}{avro_field['name']}"
            yield path, avro_field
            yield from _walk(avro_field["type"], f"{path}.")
    elif isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        yield from _walk(schema["type"], prefix)


def tagged_action(avro_field: dict[str, Any]) -> PiiAction | None:
    """The action a field's own tags ask for: ``pii: <action>``, else the default for ``pii: true`` or a
    ``PII`` Confluent tag, else None (not personal)."""
    attribute = avro_field.get(PII_ATTRIBUTE)
    if isinstance(attribute, str):
        return PiiAction(attribute)
    if attribute is True or PII_TAG in avro_field.get(CONFLUENT_TAGS, ()):
        return DEFAULT_ACTION
    return None


def schema_personal_fields(schema: dict[str, Any]) -> dict[str, PiiAction]:
    """The personal fields one schema version tags, by dotted path."""
    return {path: action for path, avro_field in schema_fields(schema) if (action := tagged_action(avro_field))}


def name_suggestions(paths: Iterable[str], personal: Collection[str]) -> list[tuple[str, str]]:
    """(path, the name part it contains) for every field whose own name contains a ``SUGGESTIVE_NAMES`` part and
    that is not personal already, nor below a personal field."""
    found = []
    for path in sorted(paths):
        covered = any(path == p or path.startswith(f"{p}.") for p in personal)
        name = path.rsplit(".", 1)[-1].lower()
        part = next((part for part in SUGGESTIVE_NAMES if part in name), None)
        if part is not None and not covered:
            found.append((path, part))
    return found
