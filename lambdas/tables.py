"""The catalog's tables as the Lambdas read them: ``tables.json``, bundled in this package by the stack.

``kafkalake.topic_catalog.tables_document`` writes the document; ``LakeTable`` is its one model, read by the
maintainer and the reconciler alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from kafkalake.lambda_env import LambdaEnvironmentError
from kafkalake.layout import TablePrefix
from kafkalake.lftags import Sensitivity
from kafkalake.naming import TableInference, crawler_name_for, default_names
from kafkalake.s3_location import s3_uri
from kafkalake.topic_spec import TableFormat

LAMBDAS_DIR = Path(__file__).parent


class LakeTable(BaseModel):
    """One topic's table: where its data lives and what Glue calls it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: str
    company: str
    domain: str
    topic: str
    database: str
    table: str
    inference: TableInference
    crawler_name: str
    table_format: TableFormat = TableFormat.HIVE
    """An Iceberg table is made and committed by the archiver: the maintainer adds no partition and starts no
    crawler for it."""
    sensitivity: Sensitivity | None = None
    """The table's LF-tag; None for a table outside the catalog, which inherits its database's (the strictest)."""
    personal_columns: tuple[str, ...] = ()
    """Columns the maintainer tags ``pii`` once they exist."""

    @classmethod
    def by_convention(cls, prefix: TablePrefix) -> LakeTable:
        """A table outside the catalog, named as the catalog would name it, crawled."""
        database, table = default_names(prefix)
        return cls(
            env=prefix.env,
            company=prefix.company,
            domain=prefix.domain,
            topic=prefix.topic,
            database=database,
            table=table,
            inference=TableInference.CRAWLER,
            crawler_name=crawler_name_for(database, table),
        )

    @property
    def prefix(self) -> TablePrefix:
        return TablePrefix(self.env, self.company, self.domain, self.topic)

    @property
    def name(self) -> str:
        """``database.table``."""
        return f"{self.database}.{self.table}"

    def location(self, bucket: str) -> str:
        """``s3://bucket/data/<env>/<company>/<domain>/<topic>/``."""
        return s3_uri(bucket, self.prefix.data_prefix())


_DOCUMENT = TypeAdapter(list[LakeTable])


def tables_from_document(document: Iterable[Mapping[str, Any]], source: str = "the tables document") -> list[LakeTable]:
    """The tables of a document; raise ``LambdaEnvironmentError`` naming each entry and field that does not validate."""
    try:
        return _DOCUMENT.validate_python(list(document))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise LambdaEnvironmentError(
            f"{source}: {problems} (kafkalake.topic_catalog.tables_document writes it; rebuild the Lambda bundle)"
        ) from exc


def read_tables(tables_file: str) -> list[LakeTable]:
    """The tables document at ``tables_file`` (relative to the ``lambdas`` package); a missing file is an error,
    never 'no tables'."""
    path = LAMBDAS_DIR / tables_file
    if not path.is_file():
        raise LambdaEnvironmentError(f"{path} is missing: the Lambda bundle must carry the catalog's tables")
    return tables_from_document(json.loads(path.read_text()), str(path))
