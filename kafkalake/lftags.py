"""Lake Formation LF-tags: the two keys kafkalake attaches to what it creates, their values, and the request
bodies that attach them. Needs nothing beyond the core: the maintainer Lambda tags the tables it creates with it,
without the catalog's YAML/Avro.

- ``sensitivity`` (``public`` < ``internal`` < ``confidential`` < ``pii``): on every table (the catalog's level) and
  on every database (the most restrictive level among its tables, so that a table nobody tagged yet, such as one a
  crawler has just created, inherits the strictest level of its database until it is tagged).
- ``pii`` (``false`` / ``true``): ``false`` on every table, ``true`` on each column that holds personal data after
  the archiver's actions or identifies a data subject (a subject field's column, the stored Kafka key ``_key``,
  clear or hashed) or can (the stored Kafka headers ``_headers``),
  and ``true`` on every database, so that the columns of a table nobody tagged yet count as personal. A grant
  whose expression says ``pii in (false)`` therefore leaves personal columns out, and every column of an untagged
  table. The maintainer tags a table's personal columns before the table itself, so a failure in between leaves
  the table untagged, never its personal columns readable.

Lake Formation's limits hold by construction: two keys per resource (at most 50), lower-case values, one value per
key per resource, and grant expressions of at most two keys (1 to 5 allowed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from kafkalake.personal import PiiAction, top_level


class Sensitivity(StrEnum):
    """A table's sensitivity, least restrictive first (the order ``strictest`` goes by)."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    PII = "pii"


SENSITIVITY_KEY = "sensitivity"
PII_KEY = "pii"
PII_COLUMN = "true"
"""The ``pii`` value of a column holding personal data, and of every database (the default of untagged tables)."""
NOT_PII = "false"
"""The ``pii`` value of every tagged table, which its other columns inherit."""
PII_VALUES = (NOT_PII, PII_COLUMN)
LEVELS = tuple(level.value for level in Sensitivity)
TAG_VALUES = {SENSITIVITY_KEY: LEVELS, PII_KEY: PII_VALUES}
"""Every LF-tag kafkalake creates, with its values."""
MAX_TAGS_PER_RESOURCE = 50
MAX_KEYS_PER_EXPRESSION = 5

TagPairs = list[dict[str, Any]]
"""``[{"TagKey": ..., "TagValues": [...]}]``, as ``AddLFTagsToResource`` and CloudFormation take them."""


def strictest(levels: Iterable[str]) -> Sensitivity:
    """The most restrictive of ``levels`` (a database's level from its tables')."""
    return max((Sensitivity(level) for level in levels), key=LEVELS.index)


def pairs(tags: dict[str, str]) -> TagPairs:
    """Tag pairs from ``{key: value}``, one value per key, keys sorted."""
    return [{"TagKey": key, "TagValues": [value]} for key, value in sorted(tags.items())]


def database_tags(table_levels: Iterable[str]) -> dict[str, str]:
    return {SENSITIVITY_KEY: strictest(table_levels).value, PII_KEY: PII_COLUMN}


def table_tags(sensitivity: str) -> dict[str, str]:
    return {SENSITIVITY_KEY: Sensitivity(sensitivity).value, PII_KEY: NOT_PII}


def column_tags() -> dict[str, str]:
    return {PII_KEY: PII_COLUMN}


def table_resource(database: str, table: str) -> dict[str, Any]:
    """An ``AddLFTagsToResource`` resource: the table (in the caller's account's catalog)."""
    return {"Table": {"DatabaseName": database, "Name": table}}


def columns_resource(database: str, table: str, columns: Iterable[str]) -> dict[str, Any]:
    """An ``AddLFTagsToResource`` resource: some columns of a table (in the caller's account's catalog)."""
    return {"TableWithColumns": {"DatabaseName": database, "Name": table, "ColumnNames": sorted(columns)}}


def personal_columns(personal_fields: Mapping[str, PiiAction], identifying: Iterable[str] = ()) -> tuple[str, ...]:
    """The Glue columns holding personal data once the archiver has applied each field's action: a field's
    top-level column at any depth (``customer.email`` makes ``customer`` personal, ``contacts[].email`` makes
    ``contacts`` personal, ``attributes{}.phone`` makes ``attributes``; Lake Formation tags columns, not what
    is inside them), except where the action is ``drop`` (the value never reaches Parquet) or the top-level
    field itself is dropped (there is no column). The columns of ``identifying`` (a topic's subject fields and
    its stored Kafka key and headers) are personal too, whatever their action: they name a data subject, which is
    what erasure finds them by (a header can). Glue keeps column names in lower case, so they are lowered."""
    dropped = {path for path, action in personal_fields.items() if action == PiiAction.DROP and top_level(path) == path}
    kept = [path for path, action in personal_fields.items() if action != PiiAction.DROP]
    columns = {top_level(path) for path in (*kept, *identifying)}
    return tuple(sorted(column.lower() for column in columns - dropped))
