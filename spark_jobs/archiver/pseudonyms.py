"""Personal fields protected in a plan's rows before the writer sees them: Spark columns only, no per-row Python.

``kafkalake.personal`` says which fields are personal and what to do with each, ``kafkalake.undeclared`` which of them
each schema version has (a version the catalog lacks may tag more); here every version's value column gets its own done:
``hmac`` replaces the leaf with the keyed hash of its canonical text (``canonical_text``, ``spark_jobs.keyed_hash``),
``drop`` removes the field, ``mask_last4`` replaces all but the last four characters with ``*``; the Kafka key and each
header's value are hashed the same way when the archive policy says ``hmac`` (``kafkalake.personal.kafka_hashed``: the
key's raw bytes, as a ``bytes`` field's). Every record on the way to a personal field is rebuilt with its fields
protected (a dropped field left out, a null record kept null); the way through an array is Spark's ``transform`` and
through a map's values ``transform_values``, so fields inside ``array<record>``, ``map<record>``, arrays of maps and so
on are reached at any depth. A table with hashed fields gets ``_pseudonym_key_id``, the id of the key that made its
pseudonyms.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, DataType, DecimalType, MapType, StructType, TimestampType

from kafkalake.personal import ELEMENTS, KEY_ID_COLUMN, VALUES, KeyInvalid, PiiAction, PseudonymKey, is_below, needs_key
from spark_jobs.keyed_hash import keyed_hash

ALL_BUT_LAST_FOUR = r"(?s).(?=.{4})"
"""Every character with at least four after it (``(?s)``: line breaks too)."""


def mask_last4(value: Column) -> Column:
    """All but the last four characters of the value (as a string) replaced by ``*``; four or fewer stay."""
    return F.regexp_replace(value.cast("string"), ALL_BUT_LAST_FOUR, "*")


def canonical_text(value: Column, data_type: DataType) -> Column:
    """The one text of a leaf that its keyed hash is taken of (docs/personal-data.md), as an erasure request
    states its subject: a timestamp as its microseconds since the epoch (whatever the session's time zone), bytes
    as they are, a decimal in plain notation with its schema's scale (``12.50``, ``0.00000010``); every other leaf
    as Spark casts it to a string (``42``, ``true``, ``2026-01-31``, ``1.5``, ``1.0E10``, an enum's symbol)."""
    if isinstance(data_type, TimestampType):
        return F.unix_micros(value).cast("string")
    if isinstance(data_type, BinaryType):
        return value
    if isinstance(data_type, DecimalType):  # the cast writes 1.0E-7 and 0E-8; format_number is exact, with commas
        return F.regexp_replace(F.format_number(value, data_type.scale), ",", "")
    return value.cast("string")


def pseudonymise(rows: DataFrame, fields: Mapping[str, Mapping[str, PiiAction]], key: PseudonymKey | None) -> DataFrame:
    """``rows`` with the personal fields of each column protected (``fields``: value column → its version's personal
    fields, ``kafkalake.undeclared.protection``; a Kafka column the archive hashes → ``kafkalake.personal.
    kafka_hashed``), and ``_pseudonym_key_id`` when a field is hashed. Raise ``KeyInvalid`` when a field is to be
    hashed and there is no key."""
    if not any(fields.values()):
        return rows
    hashed = any(needs_key(dict(personal)) for personal in fields.values())
    if hashed and key is None:
        raise KeyInvalid(
            "personal fields are to be hashed (hmac) but no pseudonym key was read: set pseudonym_secret_arn for "
            "the environment in environments.yaml (KAFKALAKE_PSEUDONYM_SECRET_ARN for the jobs)"
        )
    replaced = {
        column: _protected(F.col(column), rows.schema[column].dataType, "", personal, key)
        for column, personal in fields.items()
        if personal
    }
    if hashed and key is not None:
        replaced[KEY_ID_COLUMN] = F.lit(key.key_id)
    return rows.withColumns(replaced)


def _protected(
    value: Column, data_type: DataType, path: str, fields: Mapping[str, PiiAction], key: PseudonymKey | None
) -> Column:
    """``value`` (at ``path``; the root is ``""``, whose own action is a Kafka column's, ``kafka_hashed``) with its
    own action applied, or every personal place below it protected; untouched when nothing below it is personal."""
    action = fields.get(path)
    if action == PiiAction.HMAC and key is not None:
        return keyed_hash(key, canonical_text(value, data_type))
    if action == PiiAction.MASK_LAST4:
        return mask_last4(value)
    if path and not any(is_below(p, path) for p in fields):
        return value
    return _rebuilt(value, data_type, path, fields, key)


def _rebuilt(
    value: Column, data_type: DataType, path: str, fields: Mapping[str, PiiAction], key: PseudonymKey | None
) -> Column:
    """A record, array or map with the personal places inside it protected (``_protected``)."""
    if isinstance(data_type, StructType):
        kept = [
            (f, f"{path}.{f.name}" if path else f.name)
            for f in data_type.fields
            if fields.get(f"{path}.{f.name}" if path else f.name) != PiiAction.DROP
        ]
        members = [_protected(value[f.name], f.dataType, child, fields, key).alias(f.name) for f, child in kept]
        return F.when(value.isNotNull(), F.struct(*members))
    if isinstance(data_type, ArrayType):
        element = data_type.elementType
        return F.transform(value, lambda item: _protected(item, element, f"{path}{ELEMENTS}", fields, key))
    if isinstance(data_type, MapType):
        values = data_type.valueType
        return F.transform_values(value, lambda _, item: _protected(item, values, f"{path}{VALUES}", fields, key))
    return value
