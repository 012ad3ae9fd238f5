"""Who reads what: from the catalog and ``environments.yaml``, the LF-tags each database, table and column of an
environment carries, the grants by LF-tag expression per consumer role, and the matrix both add up to.

The stacks (``infra.constructs.lake_access``) create exactly this, the maintainer tags the tables it creates with the
tags the tables document carries, and ``kafkalake access`` prints the matrix, so a reviewer reads a change's effect
on access before it is deployed. The matrix is computed from the tags and the expressions the way Lake Formation
evaluates them (a column's tag overrides its table's, a table's its database's; every key of an expression must
match), not from the consumer settings directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from kafkalake.environments import Consumer, EnvironmentConfig
from kafkalake.lftags import (
    LEVELS,
    NOT_PII,
    PII_KEY,
    SENSITIVITY_KEY,
    column_tags,
    database_tags,
    table_tags,
)
from kafkalake.personal import UPSERT_KEY_COLUMN, PiiAction
from kafkalake.topic_catalog import Topic, debezium_columns
from kafkalake.topic_spec import Envelope, TableMode

Expression = dict[str, tuple[str, ...]]
"""An LF-tag expression: every key must have one of its values (keys AND-ed, values OR-ed)."""


def payload_columns(topic: Topic) -> tuple[str, ...]:
    """The topic's own columns (every schema version's top-level fields, in order of first appearance), minus
    those the archiver drops, then the Kafka key's and headers' when the table stores them (they can name a data
    subject, so the matrix shows who reads them), and an upsert table's key; the other Kafka metadata columns
    (``_kafka_*``, ...) come on top. A Debezium table's own columns are its row's (``debezium_columns``)."""
    dropped = {path.lower() for path, action in topic.personal_fields.items() if action == PiiAction.DROP}
    schemas = [json.loads(text) for text in topic.schemas]
    if topic.spec.envelope == Envelope.DEBEZIUM:  # the row's fields, as the upsert commit flattens them
        names = [name.lower() for schema in schemas for name in debezium_columns(schema)]
    else:
        names = [field["name"].lower() for schema in schemas for field in schema.get("fields", [])]
    upsert = (UPSERT_KEY_COLUMN,) if topic.spec.mode == TableMode.UPSERT else ()
    return (*(name for name in dict.fromkeys(names) if name not in dropped), *topic.kafka_columns, *upsert)


@dataclass(frozen=True)
class TableTags:
    """One table's tags as Lake Formation will hold them."""

    database: str
    table: str
    sensitivity: str
    personal_columns: tuple[str, ...]
    columns: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def tags(self) -> dict[str, str]:
        return table_tags(self.sensitivity)


def table_tags_of(topic: Topic) -> TableTags:
    return TableTags(
        topic.database,
        topic.table,
        topic.spec.sensitivity.value,
        topic.personal_columns,
        payload_columns(topic),
    )


@dataclass(frozen=True)
class Grant:
    """One consumer's grants: DESCRIBE on every database kafkalake tags, SELECT and DESCRIBE on the tables (and
    columns) its table expression matches."""

    consumer: Consumer

    @property
    def database_expression(self) -> Expression:
        """Every database: DESCRIBE shows a database's name only; what is inside is decided per table."""
        return {SENSITIVITY_KEY: LEVELS}

    @property
    def table_expression(self) -> Expression:
        levels = tuple(level.value for level in sorted(self.consumer.sensitivity, key=LEVELS.index))
        expression: Expression = {SENSITIVITY_KEY: levels}
        if not self.consumer.pii:
            expression[PII_KEY] = (NOT_PII,)
        return expression


@dataclass(frozen=True)
class AccessModel:
    """An environment's tags and grants."""

    env: str
    databases: dict[str, dict[str, str]]
    """Database → its tags."""
    tables: tuple[TableTags, ...]
    grants: tuple[Grant, ...]

    def column_tags(self, table: TableTags, column: str) -> dict[str, str]:
        """A column's effective tags: its own over its table's over its database's (Lake Formation's
        inheritance)."""
        own = column_tags() if column in table.personal_columns else {}
        return {**self.databases[table.database], **table.tags(), **own}

    def readable(self, grant: Grant, table: TableTags) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(readable, hidden) columns of ``table`` for the grant; readable is empty when the table does not
        match at all."""
        if not matches(grant.table_expression, {**self.databases[table.database], **table.tags()}):
            return (), ()
        readable = tuple(c for c in table.columns if matches(grant.table_expression, self.column_tags(table, c)))
        return readable, tuple(c for c in table.columns if c not in readable)


def matches(expression: Expression, tags: Mapping[str, str]) -> bool:
    """Lake Formation's rule: every key of the expression has one of its values on the resource."""
    return all(tags.get(key) in values for key, values in expression.items())


def access_model(settings: EnvironmentConfig, topics: list[Topic]) -> AccessModel:
    """The environment's tags and grants from its catalog topics and consumers."""
    tables = tuple(sorted((table_tags_of(t) for t in topics), key=lambda t: t.name))
    levels: dict[str, list[str]] = {}
    for table in tables:
        levels.setdefault(table.database, []).append(table.sensitivity)
    databases = {database: database_tags(of) for database, of in sorted(levels.items())}
    return AccessModel(settings.name, databases, tables, tuple(Grant(c) for c in settings.consumers))
