"""``kafkalake access``: the matrix the stacks will enforce (role by table by columns), as plain text, so
that a reviewer reads a pull request's effect on access before it is deployed."""

from __future__ import annotations

from kafkalake.lftags import LEVELS, TAG_VALUES
from kafkalake.permissions import AccessModel, Expression

NONE = "-"
NO_ACCESS = "no access"


def expression_text(expression: Expression) -> str:
    return " AND ".join(f"{key} in ({', '.join(values)})" for key, values in expression.items())


def matrix_lines(model: AccessModel) -> list[str]:
    """Per consumer role: its grant, then per table its sensitivity, the columns it reads and the personal
    columns hidden from it. Columns are the topic's own and the stored Kafka key (``_key``, personal); the other
    Kafka metadata columns (``_kafka_*``, ...) are readable wherever the table is."""
    tags = ", ".join(f"{k}=" + "|".join(v) for k, v in TAG_VALUES.items())
    lines = [f"environment {model.env}: LF-tags {tags}"]
    lines += [
        f"database {name}: " + ", ".join(f"{k}={v}" for k, v in sorted(tags.items()))
        for name, tags in model.databases.items()
    ]
    if not model.grants:
        return [*lines, "no consumers: nobody reads through Lake Formation (environments.yaml: consumers)"]
    width = max(len(t.name) for t in model.tables)
    level_width = max(len(level) for level in LEVELS)
    for grant in model.grants:
        lines += ["", f"{grant.consumer.name} ({grant.consumer.role_arn})"]
        lines.append(f"  SELECT on tables and columns where {expression_text(grant.table_expression)}")
        lines.append(f"  {'table':<{width}}  {'sensitivity':<{level_width}}  readable columns | hidden pii columns")
        for table in model.tables:
            readable, hidden = model.readable(grant, table)
            cells = f"{', '.join(readable)} | {', '.join(hidden) or NONE}" if readable else NO_ACCESS
            lines.append(f"  {table.name:<{width}}  {table.sensitivity:<{level_width}}  {cells}")
    return lines
