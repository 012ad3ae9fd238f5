"""B-fleet's rows of the performance section of docs/benchmarks.md and its goals in the README (``bench.report``),
from the adopted ``archiver-fleet`` result (``bench.fleet``): issue #37's fleet per cycle against one light topic,
each figure against its bar, or, from a result of before the rounds, the one fleet run against one topic."""

from __future__ import annotations

import statistics
from typing import Any

from bench.rows import Results, need, number


def verdict(value: float, bar: float) -> str:
    return "met" if value <= bar else "**not met**"


def fleet_rows(results: Results) -> list[list[str]]:
    b = need(results, "archiver-fleet")
    if "wall_ratio" not in b:
        return [single_run_row(b)]
    seconds, cpu, bars = b["run_seconds"], b["run_cpu_seconds"], b["bars"]
    rounds = len(b["wall_ratios"])
    what = (
        f"B-fleet, one cycle: {b['topics']} topics ({b['heavy_topics']} of {number(b['heavy_records'])} records, "
        f"{b['light_topics']} of {number(b['light_records'])}; 3 partitions each) in one run, {b['concurrency']} heavy "
        f"topics at a time, {rounds} rounds"
    )

    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} s"

    def ratio(name: str) -> str:
        low, high = b[f"{name}_spread"]
        return (
            f"**{b[name]:.1f}** (median of {rounds} pairs' ratios, {low:.1f}-{high:.1f}; bar ≤ {bars[name]:g}: "
            f"{verdict(b[name], bars[name])})"
        )

    per_light, (low, high) = b["cpu_seconds_per_light_topic"], b["cpu_seconds_per_light_topic_spread"]
    return [
        [
            f"{what}: seconds after the Spark start (median run; runs "
            f"{', '.join(f'{s:.1f}' for s in seconds['fleet'])})",
            median(seconds["fleet"]),
            f"one light topic alone, right after each fleet run: {median(seconds['one'])}",
            ratio("wall_ratio"),
        ],
        [
            "the same runs: CPU seconds of the process tree after the Spark start",
            median(cpu["fleet"]),
            f"one light topic alone: {median(cpu['one'])}",
            ratio("cpu_ratio"),
        ],
        [
            f"CPU seconds per light topic per run: the run of the {b['light_topics']} light topics alone, less the "
            f"one light topic's, over {b['light_topics'] - 1} (after the Spark start; each topic's "
            f"{number(b['light_records'])} records included)",
            f"{per_light:.3f} s",
            f"the {b['light_topics']} light topics alone, right after the one: {median(cpu['light'])} of CPU",
            f"**{per_light:.3f} s** (median of {rounds} rounds, {low:.3f}-{high:.3f}; bar ≤ "
            f"{bars['cpu_seconds_per_light_topic']:g} s: {verdict(per_light, bars['cpu_seconds_per_light_topic'])})",
        ],
        *latency_rows(results),
    ]


def latency_rows(results: Results) -> list[list[str]]:
    """B-fleet again with each of the driver's S3 requests delayed (``archiver-fleet-s3-latency``), when adopted."""
    b = results.get("archiver-fleet-s3-latency")
    if b is None:
        return []
    seconds, (low, high) = b["run_seconds"], b["wall_ratio_spread"]
    return [
        [
            f"the same cycle with each of the driver's S3 requests delayed {b['driver_s3_latency_ms']:g} ms (AWS's "
            "round trip, which moto lacks): seconds after the Spark start (median run)",
            f"{statistics.median(seconds['fleet']):.1f} s",
            f"one light topic alone: {statistics.median(seconds['one']):.1f} s",
            f"{b['wall_ratio']:.1f} ({low:.1f}-{high:.1f})",
        ]
    ]


def single_run_row(b: dict[str, Any]) -> list[str]:
    """A result of before the rounds: one run of the fleet against one run of one topic."""
    return [
        f"B-fleet: {b['topics']} topics of {number(b['records_per_topic'])} records each (3 partitions) in one "
        f"run, {b['concurrency']} at a time",
        f"{b['fleet_cycle_seconds']:.1f} s",
        f"one such topic alone: {b['one_topic']['seconds']:.1f} s",
        f"{b['B_fleet_ratio']:.1f} ({b['B_fleet_ratio_after_start']:.1f} after the Spark start)",
    ]


def fleet_goal_lines(results: Results) -> list[str]:
    """Issue #37's fleet goals as the README states them, once the adopted B-fleet result has its rounds."""
    b = results.get("archiver-fleet", {})
    if "wall_ratio" not in b:
        return []
    bars, per_light = b["bars"], b["cpu_seconds_per_light_topic"]
    return [
        "",
        f"Fleet goals (issue #37), one archiver cycle of {b['topics']} topics ({b['heavy_topics']} heavy, "
        f"{b['light_topics']} light) against one light topic, after the Spark start, the median of "
        f"{len(b['wall_ratios'])} alternated rounds (`bench/fleet.py`): wall time {b['wall_ratio']:.1f}x (at most "
        f"{bars['wall_ratio']:g}x: {verdict(b['wall_ratio'], bars['wall_ratio'])}), CPU {b['cpu_ratio']:.1f}x (at "
        f"most {bars['cpu_ratio']:g}x: {verdict(b['cpu_ratio'], bars['cpu_ratio'])}); CPU per light topic per run "
        f"{per_light:.3f} s (at most {bars['cpu_seconds_per_light_topic']:g} s: "
        f"{verdict(per_light, bars['cpu_seconds_per_light_topic'])}).",
        *reach_lines(b, results.get("archiver", {}).get("throughput", {})),
    ]


def reach_lines(fleet: dict[str, Any], throughput: dict[str, Any]) -> list[str]:
    """What the heavy topics alone leave of the two ratio bars: their records at Spark alone's rate (B1, the adopted
    ``archiver`` result) against the one light topic's median run, with every light topic free and the run's fixed
    cost shared; what is left, over the other light topics. Nothing without B1's Spark-alone figures."""
    if "spark_alone_cpu_seconds_per_million_records" not in throughput:
        return []
    heavy, others, bars = fleet["heavy_topics"] * fleet["heavy_records"], fleet["light_topics"] - 1, fleet["bars"]
    wall = heavy / throughput["spark_alone_records_per_second_after_start"]
    cpu = heavy / 1e6 * throughput["spark_alone_cpu_seconds_per_million_records"]
    one_wall = statistics.median(fleet["run_seconds"]["one"])
    one_cpu = statistics.median(fleet["run_cpu_seconds"]["one"])
    wall_left = max(0.0, bars["wall_ratio"] * one_wall - one_wall - wall)
    cpu_left = max(0.0, bars["cpu_ratio"] * one_cpu - one_cpu - cpu)
    out_of_reach = [name for name, left in (("wall time", wall_left), ("CPU", cpu_left)) if left <= 0]
    return [
        "",
        f"What the heavy topics alone leave of the two ratio bars: their {number(heavy)} records take at least "
        f"{wall:.1f} s and {cpu:.1f} CPU seconds at Spark alone's rate (B1), against the one light topic's run of "
        f"{one_wall:.1f} s and {one_cpu:.1f} CPU seconds. With every light topic free and the run's fixed cost "
        f"shared, the fleet would still be {(one_wall + wall) / one_wall:.2f}x in wall time and "
        f"{(one_cpu + cpu) / one_cpu:.2f}x in CPU: the bars leave each of the {others} other light topics "
        f"{wall_left / others:.4f} s of wall time and {cpu_left / others:.4f} CPU seconds"
        + (
            f"; {' and '.join(out_of_reach)} out of reach at this cycle's size unless the heavy records cost less "
            "than Spark alone's."
            if out_of_reach
            else "."
        ),
    ]
