"""Native table inference: a Parquet footer read with ranged GETs, mapped to Glue columns and merged."""

from __future__ import annotations

from typing import Any

from kafkalake.footer import NotParquet, read_footer
from kafkalake.glue import NULLABLE_PARAMETER, glue_columns


class IncompatibleSchema(ValueError):
    """A new schema version that would break the table; the table is left as it was."""


def read_footer_columns(s3: Any, bucket: str, key: str) -> list[dict[str, Any]]:
    """Glue columns of a Parquet object, from its footer only."""
    try:
        return glue_columns(read_footer(s3, bucket, key).schema.to_arrow_schema())
    except NotParquet as exc:
        raise IncompatibleSchema(str(exc)) from exc


def merge_columns(
    existing: list[dict[str, Any]], incoming: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Existing columns plus the incoming ones that are new; refuse type changes and removed required columns."""
    by_name = {c["Name"]: c for c in incoming}
    problems = [
        f"column {c['Name']!r} changes type from {c['Type']} to {by_name[c['Name']]['Type']}"
        for c in existing
        if c["Name"] in by_name and by_name[c["Name"]]["Type"] != c["Type"]
    ]
    problems += [
        f"required column {c['Name']!r} is missing"
        for c in existing
        if c["Name"] not in by_name and c.get("Parameters", {}).get(NULLABLE_PARAMETER) == "false"
    ]
    if problems:
        raise IncompatibleSchema(
            "; ".join(problems) + ". Publish the change as a new topic, or make it compatible (add optional fields)"
        )
    names = {c["Name"] for c in existing}
    added = [c for c in incoming if c["Name"] not in names]
    return [*existing, *added], added
