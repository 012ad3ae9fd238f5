"""What identifies a table's subjects in its data files, as keyed hashes: shared by the scan that finds a batch's rows
(``spark_jobs.erasure.matching``) and the subject index that tells it where to look (``spark_jobs.erasure.index``),
so both hash the same columns the same way.

A subject field the catalog pseudonymises with ``hmac``, and the Kafka key of an ``erasure: by_key`` table whose
archive hashes it (``archive.key: hmac``: its ``_key`` holds strings, the digests, where a clear key is bytes), already
hold the digest, under the key their row's ``_pseudonym_key_id`` names, and are taken as they are; any other subject
field, and a clear Kafka key, is hashed in Spark (``spark_jobs.keyed_hash``) under whichever key a request's digest
is under, a field of its canonical text (``spark_jobs.archiver.pseudonyms.canonical_text``), the archiver's for its
``hmac`` fields, so a request's digest of ``42`` finds a ``long`` 42 whether the archiver hashed it or kept it.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from kafkalake.aws import list_modified
from kafkalake.layout import PARTITION_PATH_RE
from kafkalake.personal import KAFKA_KEY_COLUMN, KEY_ID_COLUMN, Keyring, PiiAction, PseudonymKey
from kafkalake.s3_location import s3_uri
from kafkalake.topic_catalog import Topic
from spark_jobs.archiver.pseudonyms import canonical_text
from spark_jobs.archiver.transform import field_type
from spark_jobs.keyed_hash import keyed_hash


@dataclass(frozen=True)
class SubjectColumns:
    clear: list[Column]
    """The canonical text of each subject field the files keep in clear: hashed under whichever key (``hashed``)."""
    stored: list[Column]
    """Each stored pseudonym, a digest under the row's ``key_id``: each subject field the catalog pseudonymises with
    ``hmac``, and the hashed Kafka key (``stored_key``)."""
    kafka_key: Column | None
    """The clear Kafka key (``erasure: by_key`` tables whose files store it in clear): hashed under whichever key."""
    stored_key: Column | None
    """The Kafka key's digest (``erasure: by_key`` tables whose files store it hashed, ``archive.key: hmac``)."""
    key_id: Column
    """The key that made the row's stored pseudonyms (``KEY_ID_COLUMN``; null in files without it)."""

    def hashed(self, key: PseudonymKey) -> list[Column]:
        """The digests under ``key`` of the clear fields."""
        return [keyed_hash(key, c) for c in self.clear]

    def key_hash(self, key: PseudonymKey) -> Column | None:
        """The digest under ``key`` of the clear Kafka key."""
        return None if self.kafka_key is None else keyed_hash(key, self.kafka_key)

    def own(self, key_id: str) -> Column:
        """Whether the row's stored pseudonyms are under ``key_id`` (or it has none)."""
        return self.key_id.isNull() | (self.key_id == key_id)

    def tombstoned(self, key_id: str, key: PseudonymKey | None) -> Column | None:
        """What a tombstone's digest under ``key_id`` is compared with: a stored digest of the Kafka key as it is,
        when its row's pseudonyms are under ``key_id`` (no key needed), else the clear key hashed under ``key``;
        None when neither can be (no key column, or a clear one and no ``key``)."""
        if self.stored_key is not None:
            return F.when(self.own(key_id), self.stored_key)
        return None if key is None else self.key_hash(key)

    @property
    def needs_key(self) -> bool:
        """Whether matching a digest takes its key (something is hashed in the scan)."""
        return bool(self.clear) or self.kafka_key is not None


def subject_columns(frame: DataFrame, topic: Topic, *, fields: bool = True) -> SubjectColumns:
    """What identifies a row's subjects in ``frame`` (its subject fields only when ``fields``)."""
    clear, stored = [], []
    if fields:
        personal = topic.personal_fields
        for path in topic.spec.subject_fields:
            if (data_type := field_type(frame.schema, path)) is not None:
                if personal.get(path) == PiiAction.HMAC:
                    stored.append(F.col(path).cast("string"))
                else:
                    clear.append(canonical_text(F.col(path), data_type))
    by_key = topic.spec.erasure == "by_key" and KAFKA_KEY_COLUMN in frame.columns
    digested = by_key and isinstance(frame.schema[KAFKA_KEY_COLUMN].dataType, StringType)
    kafka_key = F.col(KAFKA_KEY_COLUMN)
    if digested:
        stored.append(kafka_key)
    key_id = F.col(KEY_ID_COLUMN) if KEY_ID_COLUMN in frame.columns else F.lit(None).cast("string")
    clear_key, stored_key = (None, kafka_key) if digested else (kafka_key if by_key else None, None)
    return SubjectColumns(clear, stored, clear_key, stored_key, key_id)


def signature(topic: Topic, keys: Keyring) -> str:
    """What the table's digests are taken of, and with which keys: an index of another signature is rebuilt."""
    personal = topic.personal_fields
    fields = [[path, personal.get(path) == PiiAction.HMAC] for path in topic.spec.subject_fields]
    return json.dumps({"key_ids": sorted(keys.key_ids), "fields": fields, "by_key": topic.spec.erasure == "by_key"})


def data_objects(s3: Any, bucket: str, prefix: str) -> dict[str, datetime]:
    """Key → last modified of every Parquet object under ``prefix``."""
    return list_modified(s3, bucket, prefix, ".parquet")


def by_schema_version(names: Iterable[str]) -> list[list[str]]:
    """Data object keys grouped by their partition's schema version (each group read as one frame); keys outside
    the partition layout are left out."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in names:
        match = PARTITION_PATH_RE.search(name)
        if match:
            groups[match.group(1).split("/")[0]].append(name)
    return [sorted(group) for _, group in sorted(groups.items())]


def read_objects(spark: SparkSession, bucket: str, names: Iterable[str]) -> DataFrame:
    return spark.read.option("mergeSchema", "true").parquet(*(s3_uri(bucket, n) for n in sorted(names)))


def partition_of(file: Column) -> Column:
    """The partition path of a file URI column (``F.input_file_name()``)."""
    return F.regexp_extract(file, PARTITION_PATH_RE.pattern, 1)


def union(frames: list[DataFrame]) -> DataFrame | None:
    """The frames' rows as one frame (by column name); None for no frame."""
    return functools.reduce(DataFrame.unionByName, frames) if frames else None
