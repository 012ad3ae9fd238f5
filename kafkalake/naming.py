"""Glue names by convention. Dependency-free: the maintainer Lambda imports it without the catalog's YAML/Avro."""

from __future__ import annotations

import re
from enum import StrEnum

from kafkalake.layout import TablePrefix


class TableInference(StrEnum):
    CRAWLER = "crawler"
    NATIVE = "native"


def athena_name(raw: str) -> str:
    """A Glue/Athena-legal name: lower case letters, digits and underscores."""
    return re.sub(r"[^a-z0-9_]+", "_", raw.lower()).strip("_")


def default_names(prefix: TablePrefix) -> tuple[str, str]:
    """The Glue (database, table) a data prefix maps to unless the catalog overrides them."""
    return athena_name(f"{prefix.company}_{prefix.env}"), athena_name(prefix.topic)


def crawler_name_for(database: str, table: str) -> str:
    """The naming convention the maintainer relies on to find a table's crawler."""
    return f"kafkalake-{database}-{table}"


ARCHIVER_GROUP_PREFIX = "kafkalake-archiver."
"""Every consumer group the archiver uses begins so: one prefixed Kafka ACL covers them all."""


def consumer_group(kafka_topic: str) -> str:
    """The consumer group a topic's plans are read and committed with."""
    return f"{ARCHIVER_GROUP_PREFIX}{kafka_topic}"


SHARED_READ_GROUP = consumer_group("(shared)")
"""The consumer group a light pass reads with (``spark_jobs.archiver.task_reader``; a plan alone reads with its
topic's own): under the same prefix as every topic's group, and no topic's own (parentheses are not allowed in a
Kafka topic's name)."""
