"""Personal fields protected in a plan's rows before the writer sees them: Spark columns only, no per-row Python.

``kafkalake.personal`` says which fields are personal and what to do with each; here every schema version's value
column that has a field gets it done: ``hmac`` replaces the value with its keyed hash (``spark_jobs.keyed_hash``,
hex, equal to ``PseudonymKey.digest`` of the value as a string), ``drop`` removes the field, ``mask_last4``
replaces all but the last four characters with ``*``. Nested fields (also under ``[null, record]`` unions) are
reached with ``withField``/``dropFields``, which leave a null parent null. A table with hashed fields gets
``_pseudonym_key_id``, the id of the key that made its pseudonyms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kafkalake.personal import KEY_ID_COLUMN, KeyInvalid, PiiAction, PseudonymKey, needs_key
from spark_jobs.archiver.transform import field_type
from spark_jobs.keyed_hash import keyed_hash

ALL_BUT_LAST_FOUR = r"(?s).(?=.{4})"
"""Every character with at least four after it (``(?s)``: line breaks too)."""


def mask_last4(value: Column) -> Column:
    """All but the last four characters of the value (as a string) replaced by ``*``; four or fewer stay."""
    return F.regexp_replace(value.cast("string"), ALL_BUT_LAST_FOUR, "*")


def pseudonymise(
    rows: DataFrame, fields: Mapping[str, PiiAction], key: PseudonymKey | None, value_columns: Sequence[str]
) -> DataFrame:
    """``rows`` with every personal field of every value column protected, and ``_pseudonym_key_id`` when a field
    is hashed. Raise ``KeyInvalid`` when a field is to be hashed and there is no key."""
    if not fields:
        return rows
    hashed = needs_key(dict(fields))
    if hashed and key is None:
        raise KeyInvalid(
            "personal fields are to be hashed (hmac) but no pseudonym key was read: set pseudonym_secret_arn for "
            "the environment in environments.yaml (KAFKALAKE_PSEUDONYM_SECRET_ARN for the jobs)"
        )
    replaced = {column: _protected(rows, column, fields, key) for column in value_columns}
    if hashed and key is not None:
        replaced[KEY_ID_COLUMN] = F.lit(key.key_id)
    return rows.withColumns(replaced)


def _protected(rows: DataFrame, column: str, fields: Mapping[str, PiiAction], key: PseudonymKey | None) -> Column:
    """One version's value column with the fields it has protected: replacements first, then drops (a dropped
    parent takes its children with it)."""
    schema = rows.schema[column].dataType
    present = [p for p in sorted(fields) if isinstance(schema, StructType) and field_type(schema, p) is not None]
    value = F.col(column)
    for path in present:
        original = F.col(f"{column}.{path}")
        if fields[path] == PiiAction.HMAC and key is not None:
            value = value.withField(path, keyed_hash(key, original))
        elif fields[path] == PiiAction.MASK_LAST4:
            value = value.withField(path, mask_last4(original))
    drops = [p for p in present if fields[p] == PiiAction.DROP]
    for path in drops:
        if not any(path.startswith(f"{parent}.") for parent in drops):
            value = value.dropFields(path)
    return value
