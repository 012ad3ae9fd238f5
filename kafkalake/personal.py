"""Personal data: which fields hold it, how each is protected, and the keyed hash that stands in for a value.

Fields are declared personal where producers already describe their data, in the Avro schema (Confluent's
``"confluent:tags": ["PII"]`` on a field, or a ``"pii"`` attribute: ``true`` for the default action, or an action
name), and the catalog file may override or add (``pii: {customer.email: hmac, card.pan: mask_last4}``). A field is
found at any depth, and named by its path (``SchemaPath``): dotted names through records, ``[]`` after an array for
its elements, ``{}`` after a map for its values (``contacts[].email``, ``attributes{}.phone``, ``tags[]``).
``hmac`` and ``mask_last4`` take one leaf each (``action_refusal``).

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
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

HASH_BLOCK_BYTES = 64
"""SHA-256's block size: HMAC pads the key to it."""
MIN_KEY_BYTES = 32
PII_TAG = "PII"
CONFLUENT_TAGS = "confluent:tags"
PII_ATTRIBUTE = "pii"
KAFKA_KEY_COLUMN = "_key"
"""The column holding a record's Kafka key, or its keyed hash, for a topic whose archive keeps it (``archive.key``)."""
UPSERT_KEY_COLUMN = "_upsert_key"
"""An upsert table's key as text (``spark_jobs.archiver.upsert``): what its commits delete by. It holds the Kafka key
or the key fields' values, so it is personal where they are."""
HEADERS_COLUMN = "_headers"
"""The column holding a record's Kafka headers (name and value), for a topic whose archive keeps them
(``archive.headers``)."""
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


def kafka_hashed(column: str) -> dict[str, PiiAction]:
    """What ``hmac`` hashes in a Kafka column (``archive.key`` or ``archive.headers``), as a path below the column
    (``SchemaPath``, the column itself ``""``): the key's bytes; each header's value, its name kept (names are chosen
    by the producers' code, as field names are; values are what can name a subject)."""
    return {KAFKA_KEY_COLUMN: {"": PiiAction.HMAC}, HEADERS_COLUMN: {f"{ELEMENTS}.value": PiiAction.HMAC}}[column]


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


CURRENT_STAGE = "AWSCURRENT"
PREVIOUS_STAGE = "AWSPREVIOUS"
"""The secret's version before the last ``PutSecretValue``: the key a rotation replaced (Secrets Manager moves the
label itself)."""


class KeyUnavailable(LookupError):
    """Pseudonyms of a key id the job cannot read, or that no request's digest is under; the message names the key
    id and the table, never key material."""


@dataclass(frozen=True)
class Keyring:
    """The pseudonym keys a job can read: the current one, which hashes everything new, and the one a rotation
    replaced, still kept by the secret (``PREVIOUS_STAGE``), so rows and requests of before the rotation are still
    matched (``spark_jobs.erasure``)."""

    current: PseudonymKey
    previous: tuple[PseudonymKey, ...] = ()

    @property
    def keys(self) -> tuple[PseudonymKey, ...]:
        return (self.current, *self.previous)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(k.key_id for k in self.keys)

    def get(self, key_id: str) -> PseudonymKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)


def load_key(secrets: Any, secret_arn: str | None) -> PseudonymKey:
    """The key in ``secret_arn``, read with the injected Secrets Manager client."""
    return PseudonymKey.from_secret(_secret_value(secrets, secret_arn, CURRENT_STAGE), secret_arn or "")


def load_keys(secrets: Any, secret_arn: str | None) -> Keyring:
    """The current key in ``secret_arn`` and the previous one when the secret keeps one of another key id."""
    current = load_key(secrets, secret_arn)
    try:
        value = _secret_value(secrets, secret_arn, PREVIOUS_STAGE)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
        return Keyring(current)
    previous = PseudonymKey.from_secret(value, f"{secret_arn} ({PREVIOUS_STAGE})")
    return Keyring(current, (previous,) if previous.key_id != current.key_id else ())


def _secret_value(secrets: Any, secret_arn: str | None, stage: str) -> str:
    if not secret_arn:
        raise KeyInvalid(
            "no pseudonym key configured: set pseudonym_secret_arn for the environment in environments.yaml "
            "(KAFKALAKE_PSEUDONYM_SECRET_ARN for the jobs)"
        )
    return str(secrets.get_secret_value(SecretId=secret_arn, VersionStage=stage)["SecretString"])


ELEMENTS = "[]"
"""Appended to an array's path to name its elements: ``contacts[].email``, ``tags[]``."""
VALUES = "{}"
"""Appended to a map's path to name its values: ``attributes{}.phone``, ``labels{}``."""
COMPOSITE_KINDS = ("record", "array", "map", "union")
"""Kinds of value that are not one leaf: hashing or masking one would protect Spark's rendering of the whole."""
_NAMED = ("record", "enum", "fixed")


@dataclass(frozen=True)
class SchemaPath:
    """One addressable place of a schema: a field at any depth, or an array's elements, or a map's values."""

    path: str
    """Dotted field names, ``[]`` after an array and ``{}`` after a map: ``contacts[].email``."""
    kind: str
    """``record``, ``array``, ``map``, ``union`` (of several non-null types), or a leaf's Avro type or logical
    type (``string``, ``long``, ``enum``, ``timestamp-millis``, ...); ``[null, X]`` is X."""
    field: dict[str, Any] | None
    """The Avro field declaring it; None for elements and map values (no field to tag)."""


def schema_paths(schema: dict[str, Any]) -> Iterator[SchemaPath]:
    """Every place of a record schema, parents before their children: records, ``[null, X]`` unions, arrays,
    maps, and named types used again by name, at any depth (a recursive type is followed once)."""
    yield from _walk(schema, "", None, {}, ())


def schema_fields(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every field of a record schema at any depth, with its path (``schema_paths``)."""
    return ((p.path, p.field) for p in schema_paths(schema) if p.field is not None)


def within_collection(path: str) -> bool:
    """Whether ``path`` lies inside an array or a map (each row holds any number of its values)."""
    return ELEMENTS in path or VALUES in path


def top_level(path: str) -> str:
    """The top-level field (the table's column) holding ``path``."""
    return re.split(r"[.\[{]", path, maxsplit=1)[0]


def is_below(path: str, parent: str) -> bool:
    """Whether ``path`` is inside ``parent``: a field of it, its elements or values, or theirs."""
    return path.startswith(parent) and path[len(parent) : len(parent) + 1] in (".", "[", "{")


def _walk(
    avro_type: Any, path: str, avro_field: dict[str, Any] | None, names: dict[str, Any], stack: tuple[str, ...]
) -> Iterator[SchemaPath]:
    resolved = _resolve(avro_type, names)
    kind = _kind(resolved)
    if path:
        yield SchemaPath(path, kind, avro_field)
    if kind == "record":
        name = resolved.get("name", "")
        if name in stack:
            return
        for child in resolved.get("fields", []):
            child_path = f"{path}.{child['name']}" if path else child["name"]
            yield from _walk(child["type"], child_path, child, names, (*stack, name))
    elif kind == "array":
        yield from _walk(resolved["items"], f"{path}{ELEMENTS}", None, names, stack)
    elif kind == "map":
        yield from _walk(resolved["values"], f"{path}{VALUES}", None, names, stack)


def _resolve(avro_type: Any, names: dict[str, Any]) -> Any:
    """The type itself: ``[null, X]`` is X, a name is the type it names, ``{"type": X}`` is X; named types are
    remembered (by name and full name) for later references."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        return _resolve(branches[0], names) if len(branches) == 1 else avro_type
    if isinstance(avro_type, str):
        return names.get(avro_type, avro_type)
    if isinstance(avro_type, dict) and isinstance(avro_type.get("type"), (dict, list)):
        return _resolve(avro_type["type"], names)
    if isinstance(avro_type, dict) and avro_type.get("type") in _NAMED and "name" in avro_type:
        names[avro_type["name"]] = avro_type
        if "namespace" in avro_type:
            names[f"{avro_type['namespace']}.{avro_type['name']}"] = avro_type
    return avro_type


def _kind(resolved: Any) -> str:
    if isinstance(resolved, list):
        return "union"
    if isinstance(resolved, dict):
        return str(resolved.get("logicalType") or resolved.get("type"))
    return str(resolved)


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
    that is not personal already, nor below a personal field (elements and map values have no name of their own)."""
    found = []
    for path in sorted(paths):
        if path.endswith((ELEMENTS, VALUES)):
            continue
        covered = any(path == p or is_below(path, p) for p in personal)
        name = path.rsplit(".", 1)[-1].lower()
        part = next((part for part in SUGGESTIVE_NAMES if part in name), None)
        if part is not None and not covered:
            found.append((path, part))
    return found


def action_refusal(path: str, action: PiiAction, kind: str) -> tuple[str, str] | None:
    """Why ``action`` cannot protect the value at ``path`` (of ``kind``, ``SchemaPath.kind``), and the fix; None
    when it can. ``hmac`` and ``mask_last4`` take one leaf: of a record, array or map they would protect Spark's
    rendering of the whole value, which no subject's digest matches and no one can join on. ``drop`` leaves a
    field out: an array's elements or a map's values cannot be left out of their collection."""
    if action == PiiAction.DROP and path.endswith((ELEMENTS, VALUES)):
        whole = path[: -len(ELEMENTS)]
        return (
            f"drop leaves a field out, and {path} names the elements of {whole}, not a field",
            f"drop {whole} itself, or hash its elements ({path}: hmac)",
        )
    if action == PiiAction.DROP or kind not in COMPOSITE_KINDS:
        return None
    leaves = {"record": f"{path}.<field>", "array": f"{path}{ELEMENTS}", "map": f"{path}{VALUES}"}
    return (
        f"{path} is a {kind}: {action} of it would protect the text of the whole value, which no erasure "
        "request's digest matches and no table can join on",
        f"name its leaves instead ({leaves.get(kind, 'one branch')}: {action}), or drop {path}",
    )


def unvetted_paths(schema: dict[str, Any], known: Collection[str], personal: Collection[str]) -> tuple[str, ...]:
    """The leaves of ``schema`` (places with nothing below them, ``schema_paths``) that no version the catalog
    declares has (``known``) and that are not personal (``personal``: at or below one of its paths): what a version
    the catalog lacks would put in a table unvetted. A new record, array or map counts by its leaves, so one
    whose every leaf is tagged is vetted."""
    paths = [p.path for p in schema_paths(schema)]
    leaves = [p for p in paths if not any(is_below(other, p) for other in paths)]
    covered = [p for p in leaves if any(p == q or is_below(p, q) for q in personal)]
    return tuple(p for p in leaves if p not in known and p not in covered)
