"""``bench.peer``'s rows in docs/benchmarks.md's table: kafkalake against the Apache Iceberg Kafka Connect sink."""

from __future__ import annotations

import statistics
from typing import Any

from bench.rows import Results, number


def peer_rows(results: Results) -> list[list[str]]:
    """The peer benchmark's rows, when it has a result: each figure's medians and their pairs' ratio, then the
    rows and duplicates in each side's tables, after the pairs and after the kill-and-restart runs."""
    if "peer" not in results:
        return []
    p = results["peer"]
    settings = p["peer"]
    sink, connect = (settings[name].rsplit(":", 1)[1] for name in ("sink", "connect_runtime"))
    what = (
        f"vs the Iceberg Kafka Connect sink ({sink}, {settings['tasks_max']} tasks, commit every "
        f"{settings['commit_interval_seconds']:.0f} s; Connect {connect}, one worker), {number(p['records'])} JSON "
        f"records in {p['topic_partitions']} partitions, each side draining into a new Iceberg table, from its start"
    )
    ours, theirs = p["kafkalake_runs"], p["peer_runs"]
    per_cpu = [[p["records"] / r["cpu_seconds"] for r in runs] for runs in (ours, theirs)]
    rows = [
        figure(f"{what}: records per CPU-second of the process tree", per_cpu, p, "records_per_cpu_second", "{:,.0f}"),
        figure(
            "the same: wall seconds to drain",
            [[r["wall_seconds"] for r in runs] for runs in (ours, theirs)],
            p,
            "wall_seconds",
            "{:.0f} s",
        ),
        figure(
            "the same: data files per table-hour after the drain",
            [[r["data_files_per_table_hour"] for r in runs] for runs in (ours, theirs)],
            p,
            "data_files_per_table_hour",
            "{:.1f}",
        ),
        ["the same: rows, duplicate (partition, offset) pairs", counts(ours), counts(theirs), exact(ours, theirs, p)],
    ]
    killed = p.get("kill_and_restart")
    if killed:
        rows.append(
            [
                f"the same, each side SIGKILLed {killed['kills']} times at random moments while draining and "
                "restarted: rows, duplicate (partition, offset) pairs",
                counts([killed["kafkalake"]]),
                counts([killed["peer"]]),
                f"expected {number(p['records'])} rows, 0 duplicates",
            ]
        )
    return rows


def figure(what: str, values: list[list[float]], p: dict[str, Any], name: str, shown: str) -> list[str]:
    """One figure's row: each side's median, and the median and spread of the pairs' ratios (kafkalake ÷ peer)."""
    ratio = p[f"{name}_kafkalake_to_peer"]
    low, high = ratio["spread"]
    return [
        what,
        shown.format(statistics.median(values[0])),
        f"the sink: {shown.format(statistics.median(values[1]))}",
        f"**{ratio['median']:.2f}** (median of {len(ratio['pairs'])} pairs' ratios, {low:.2f}-{high:.2f})",
    ]


def exact(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], p: dict[str, Any]) -> str:
    """Which sides kept every record once in every table."""
    kept = [
        all(r["rows"] == p["records"] and not r["duplicate_partition_offset_pairs"] for r in runs)
        for runs in (ours, theirs)
    ]
    return {
        (True, True): "exact: both",
        (True, False): "exact: kafkalake only",
        (False, True): "exact: the sink only",
    }.get((kept[0], kept[1]), "exact: neither")


def counts(runs: list[dict[str, Any]]) -> str:
    """Each table's rows and duplicates, once when every table has the same."""
    found = [f"{number(r['rows'])} rows, {r['duplicate_partition_offset_pairs']} duplicates" for r in runs]
    return f"{found[0]} in each of {len(found)} tables" if len(found) > 1 and len(set(found)) == 1 else "; ".join(found)
