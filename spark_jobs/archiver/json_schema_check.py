"""JSON Schema records checked against their version's schema, in the Python workers (``kafkalake.json_schema``
compiles the check; fastjsonschema turns it into Python code once per worker and schema)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pandas as pd
from pyspark.sql import Column
from pyspark.sql.pandas.functions import pandas_udf

from kafkalake.json_schema import validator
from kafkalake.registered_formats import JsonSchemaDecoding

INVALID = "json_schema_invalid"
"""The quarantine reason of a record its schema refuses, followed by where and which rule (``$.amount: minimum``)."""
NOT_JSON = "bad_json"


@lru_cache(maxsize=64)
def _check(decoding: JsonSchemaDecoding) -> Callable[[Any], str | None]:
    references = {name: json.loads(text) for name, text in decoding.references}
    return validator(json.loads(decoding.schema), references)


def violation(text: str | bytes | None, decoding: JsonSchemaDecoding) -> str | None:
    """Why ``text`` (a record's JSON after the Confluent header) is refused: ``bad_json``, or ``INVALID`` with where
    and which rule; None when it validates or is null."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return NOT_JSON
    found = _check(decoding)(value)
    return None if found is None else f"{INVALID}: {found}"


def violations(payload: Column, decoding: JsonSchemaDecoding) -> Column:
    """``violation`` of each row's ``payload`` (binary; null where the row is not this version's)."""

    def check(values: pd.Series) -> pd.Series:
        return values.map(lambda v: violation(v, decoding))

    return pandas_udf(check, "string")(payload)  # type: ignore[call-overload,no-any-return]
