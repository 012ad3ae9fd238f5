"""The README's freshness section (``bench.report``): dollars a day and worst-case freshness per archiver schedule,
from the adopted cost result's ``schedules`` (``bench.freshness``), rendered as ``bench.rows`` renders the
performance section's tables."""

from __future__ import annotations

from typing import Any

from bench.rows import Results, need, table


def schedule_lines(results: Results) -> list[str]:
    """Dollars a day and worst-case freshness per archiver schedule (``bench.freshness``), the goals each meets, the
    default chosen from them and why, and what a faster maintainer buys."""
    compared = need(results, "cost")["schedules"]
    goals, options, chosen = compared["goals"], compared["options"], compared["chosen"]
    faster, every = compared["faster_maintainer"], chosen["maintain_every_minutes"]
    header = [
        "archiver every",
        "maintainer every",
        "kafkalake $/day",
        "Iceberg tables queryable within",
        "Hive tables queryable within",
        "Connect's S3 sink $/day",
        "its files in S3 within",
        "Firehose from MSK $/day",
        "its objects in S3 within",
    ]
    shortest = compared["shortest_allowed_minutes"]
    under = [str(o["archive_every_minutes"]) for o in options if o["archive_every_minutes"] < shortest]
    below = (
        f" Every {' or '.join(under)} minutes is shown, not allowed: the setting's shortest is {shortest}."
        if under
        else ""
    )
    met_by = {
        goal: " or ".join(str(o["archive_every_minutes"]) for o in options if o["meets"][goal])
        for goal in ("iceberg", "hive", "dollars")
    }
    met = "; ".join(
        f"{what} every {met_by[goal]} minutes" if met_by[goal] else f"{what} at no schedule"
        for goal, what in (("iceberg", "Iceberg's is met"), ("hive", "Hive's"), ("dollars", "the bill's"))
    )
    return [
        "Freshness and dollars a day per archiver schedule (`bench/freshness.py` over the bill of `bench/cost.py`): "
        "the worst case from a record produced to it being queryable, in minutes. Iceberg tables are queryable at the "
        "archiver's commit; Hive tables once the maintainer has added their partition. Connect's S3 sink rotates "
        "(`rotate.schedule.interval.ms`) and Firehose buffers as often as we archive; their figures are their "
        f"delivery to S3, since neither adds Glue partitions.{below}",
        "",
        *table(header, [_schedule_row(o, chosen) for o in [*options, faster]]),
        "",
        f"Goals (issue #37), the maintainer every {every} minutes: Iceberg tables queryable within "
        f"{goals['iceberg_minutes']:g} minutes, Hive tables within {goals['hive_minutes']:g}, for at most "
        f"${goals['dollars_per_day']:.2f} a day. {met}. {_default_sentences(compared)}",
        "",
        f"The maintainer every {faster['maintain_every_minutes']} minutes instead of {every} (the fastest its default "
        f"timeout allows; the last row) makes Hive tables queryable within {faster['worst_minutes']['hive']:.1f} "
        f"minutes instead of {chosen['worst_minutes']['hive']:.1f}, for ${faster['dollars_per_day']['kafkalake']:.2f} "
        f"a day instead of ${chosen['dollars_per_day']['kafkalake']:.2f}. "
        "With crawler inference, a new table or schema version also waits for a crawler run, which no benchmark "
        "measures.",
    ]


def _default_sentences(compared: dict[str, Any]) -> str:
    """The default schedule, why it was chosen, which goal it misses, and what it leaves of those it meets."""
    goals, chosen = compared["goals"], compared["chosen"]
    dollars, worst = chosen["dollars_per_day"], chosen["worst_minutes"]
    default = f"The default, archiving every {chosen['archive_every_minutes']} minutes (`archiver_schedule_minutes`), "
    if chosen["because"] == "every goal":
        default += "is the cheapest schedule that meets every goal."
    elif chosen["because"] == "freshness goals":
        default += (
            "is the cheapest schedule that meets both freshness goals, freshness being what the product is weighed "
            f"on. Its bill, ${dollars['kafkalake']:.2f} a day, misses the ${goals['dollars_per_day']:.2f} goal: "
            f"**not met** (Connect's S3 sink rotating as often: ${dollars['kafka_connect_s3_sink']:.2f})."
        )
    else:
        default += (
            f"is the freshest for Hive tables: no schedule of {compared['shortest_allowed_minutes']} minutes or more "
            "(the shortest the setting allows) meets both freshness goals, **not met**."
        )
    spare = [
        f"{goals[f'{table}_minutes'] - worst[table]:.1f} minutes of {name}"
        for table, name in (("iceberg", "Iceberg's goal"), ("hive", "Hive's"))
        if chosen["meets"][table]
    ]
    if not spare:
        return default
    return (
        f"{default} It leaves {' and '.join(spare)} for what the model does not count: EMR Serverless's start of a "
        "job run (not measured locally; AWS publishes no figure without pre-initialized capacity) and S3's event "
        "delivery."
    )


def _schedule_row(option: dict[str, Any], chosen: dict[str, Any]) -> list[str]:
    dollars, worst = option["dollars_per_day"], option["worst_minutes"]
    every = f"{option['archive_every_minutes']} min"
    default = (option["archive_every_minutes"], option["maintain_every_minutes"]) == (
        chosen["archive_every_minutes"],
        chosen["maintain_every_minutes"],
    )
    return [
        f"**{every}** (default)" if default else every,
        f"{option['maintain_every_minutes']} min",
        f"{dollars['kafkalake']:.2f}",
        f"{worst['iceberg']:.1f}",
        f"{worst['hive']:.1f}",
        f"{dollars['kafka_connect_s3_sink']:.2f}",
        f"{worst['kafka_connect_s3_sink']:.1f}",
        f"{dollars['firehose']:.2f}",
        f"{worst['firehose']:.1f}",
    ]
