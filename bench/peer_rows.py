"""``bench.peer``'s rows in docs/benchmarks.md's table: kafkalake against the Apache Iceberg Kafka Connect sink."""

from __future__ import annotations

import statistics
from typing import Any

from bench.rows import Results, number
from kafkalake.environments import ARCHIVER_SCHEDULE_MINIMUM_MINUTES, EnvironmentConfig


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
                f"restarted{kill_settings(killed['peer'])}: rows, duplicate (partition, offset) pairs",
                counts([killed["kafkalake"]]),
                counts([killed["peer"]]),
                f"expected {number(p['records'])} rows, 0 duplicates",
            ]
        )
    return rows + freshness_rows(results)


def freshness_rows(results: Results) -> list[list[str]]:
    """``bench.peer_freshness``'s rows, when it has a result: the sink measured at each commit interval, then each
    side at the settings derived from the measured runs (its default, and the archiver's shortest schedule)."""
    if "peer-freshness" not in results:
        return []
    f = results["peer-freshness"]
    stream = f"{f['rate_per_second']} JSON records/s for {f['stream_seconds']:.0f} s"
    rows = [
        [
            f"freshness, produced → readable in the sink's table, measured ({stream}), commit every "
            f"{run['commit_interval_seconds']:g} s: median / p95 / worst",
            f"no such setting: the archiver's shortest schedule is {ARCHIVER_SCHEDULE_MINIMUM_MINUTES} min (below)",
            f"the sink: {run['median_seconds']:.1f} / {run['p95_seconds']:.1f} / {run['max_seconds']:.1f} s",
            f"{number(run['rows'])} of {number(run['produced'])} rows",
        ]
        for run in f["sink"]
    ]
    derived, archiver = f["derived"], f["archiver"]
    sink_default = derived["sink_default_interval"]
    default = EnvironmentConfig.model_fields["archiver_schedule_minutes"].default
    for schedule in derived["archiver"].values():
        minutes = schedule["schedule_minutes"]
        which = "its default" if minutes == default else "the shortest allowed"
        rows.append(
            [
                f"freshness, derived: worst produced → readable, the archiver every {minutes} min ({which}; its run "
                "measured: "
                f"{archiver['commit_seconds']:.0f} s from its start to its commit over {number(archiver['records'])} "
                "records) against the sink at its default 300 s commit interval",
                f"{schedule['worst_seconds'] / 60:.1f} min",
                f"the sink: {sink_default['worst_seconds'] / 60:.1f} min",
                f"{schedule['worst_seconds'] / sink_default['worst_seconds']:.2f}",
            ]
        )
    return rows


def kill_settings(peer: dict[str, Any]) -> str:
    """The sink's settings in its kill run, where the result records them (results before #55's fix do not)."""
    if "connect_defaults" not in peer:
        return ""
    if peer["connect_defaults"]:
        return " (the sink's worker at Connect's default rebalance delay and session timeout)"
    return " (the sink's worker with scheduled.rebalance.max.delay.ms 0 and its task consumers' session 10 s)"


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
