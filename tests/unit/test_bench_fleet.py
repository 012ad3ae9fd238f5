"""B-fleet's logic (``bench.fleet``): its rounds' ratios and CPU per light topic against issue #37's bars, and how the
docs and the README render them (``bench.fleet_rows``); B3's pairs as the docs render them (``bench.rows``)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import fleet_rows, fleet_scale, rows
from bench.fleet import BARS, RUNS, per_light_topic, summary


def run(seconds: float, cpu: float) -> dict[str, Any]:
    """An archiver child's result as far as the summary reads it."""
    return {"run_seconds": seconds, "run_cpu_seconds": cpu}


ROUNDS = {  # three rounds; 11 light topics, so CPU per light topic is (light - one) / 10
    "fleet": [run(30, 60), run(24, 50), run(40, 80)],
    "one": [run(10, 10), run(8, 10), run(10, 20)],
    "light": [run(20, 30), run(18, 25), run(30, 45)],
}


def test_cpu_per_light_topic_is_the_light_run_less_the_one_over_the_topics_it_has_more() -> None:
    assert per_light_topic(light_cpu=30.0, one_cpu=10.0, light_topics=11) == 2.0
    assert per_light_topic(light_cpu=10.5, one_cpu=10.0, light_topics=6) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="two or more"):
        per_light_topic(10.0, 10.0, 1)


def test_the_fleet_summary_gives_each_rounds_figures_their_median_spread_and_verdict() -> None:
    result = summary(ROUNDS, light_topics=11)
    assert result["wall_ratios"] == [3.0, 3.0, 4.0] and result["wall_ratio"] == 3.0
    assert result["wall_ratio_spread"] == [3.0, 4.0]
    assert result["cpu_ratios"] == [6.0, 5.0, 4.0] and result["cpu_ratio"] == 5.0
    assert result["cpu_ratio_spread"] == [4.0, 6.0]
    assert result["cpu_seconds_per_light_topic_rounds"] == [2.0, 1.5, 2.5]
    assert result["cpu_seconds_per_light_topic"] == 2.0
    assert result["cpu_seconds_per_light_topic_spread"] == [1.5, 2.5]
    assert result["heavy_topics_cpu_seconds_rounds"] == [30, 25, 35]  # the fleet's run less the light topics' alone
    assert result["met"] == dict.fromkeys(BARS, False) and result["bars"] == BARS
    assert result["runs"] == ROUNDS and list(result["run_seconds"]) == list(RUNS)
    met = summary({"fleet": [run(15, 15)], "one": [run(10, 10)], "light": [run(10, 10.5)]}, light_topics=6)
    assert met["met"] == {"wall_ratio": True, "cpu_ratio": True, "cpu_seconds_per_light_topic": True}


def fleet_result(runs: dict[str, list[dict[str, Any]]], light_topics: int) -> dict[str, Any]:
    return {
        "heavy_topics": 4,
        "heavy_records": 173_611,
        "light_topics": light_topics,
        "light_records": 2000,
        "topics": 4 + light_topics,
        "concurrency": 4,
        **summary(runs, light_topics),
    }


def test_the_fleet_rows_show_each_figure_against_its_bar_and_say_when_it_is_not_met() -> None:
    rendered = fleet_rows.fleet_rows({"archiver-fleet": fleet_result(ROUNDS, 11)})
    assert [row[3].split(" (")[0] for row in rendered] == ["**3.0**", "**5.0**", "**2.000 s**"]
    assert all("**not met**" in row[3] for row in rendered)
    assert "3.0-4.0; bar ≤ 2" in rendered[0][3] and "1.500-2.500; bar ≤ 0.1 s" in rendered[2][3]
    assert "15 topics (4 of 173,611 records, 11 of 2,000" in rendered[0][0] and "30.0, 24.0, 40.0" in rendered[0][0]
    assert rendered[0][1] == "30.0 s" and rendered[0][2].endswith("10.0 s")
    goals = fleet_rows.fleet_goal_lines({"archiver-fleet": fleet_result(ROUNDS, 11)})
    assert goals[0] == "" and "wall time 3.0x (at most 2x: **not met**)" in goals[1]
    assert "CPU per light topic per run 2.000 s (at most 0.1 s: **not met**)" in goals[1]
    met = fleet_result({"fleet": [run(15, 15)], "one": [run(10, 10)], "light": [run(10, 10.5)]}, 6)
    assert all(row[3].endswith(": met)") for row in fleet_rows.fleet_rows({"archiver-fleet": met}))


def test_the_cycle_with_the_drivers_s3_requests_delayed_is_a_row_of_its_own_when_adopted() -> None:
    plain = fleet_result(ROUNDS, 11)
    delayed = {**fleet_result(ROUNDS, 11), "driver_s3_latency_ms": 50.0}
    assert len(fleet_rows.fleet_rows({"archiver-fleet": plain})) == 3
    rows_with = fleet_rows.fleet_rows({"archiver-fleet": plain, "archiver-fleet-s3-latency": delayed})
    assert rows_with[:3] == fleet_rows.fleet_rows({"archiver-fleet": plain})
    assert rows_with[3] == [
        "the same cycle with each of the driver's S3 requests delayed 50 ms (AWS's round trip, which moto lacks): "
        "seconds after the Spark start (median run)",
        "30.0 s",
        "one light topic alone: 10.0 s",
        "3.0 (3.0-4.0)",
    ]


def test_the_goals_say_what_the_heavy_topics_alone_leave_of_the_ratio_bars_at_spark_alones_rate() -> None:
    fleet = fleet_result(ROUNDS, 11)  # 4 x 173,611 heavy records; the one light topic's median run: 10 s, 10 CPU s
    throughput = {  # the heavy records take 4 s and 12 CPU s at Spark alone's rate
        "spark_alone_records_per_second_after_start": 173_611.0,
        "spark_alone_cpu_seconds_per_million_records": 12.0 / (4 * 0.173611),
    }
    [blank, said] = fleet_rows.reach_lines(fleet, throughput)
    assert blank == "" and "their 694,444 records take at least 4.0 s and 12.0 CPU seconds" in said
    assert "still be 1.40x in wall time and 2.20x in CPU" in said
    assert "each of the 10 other light topics 0.6000 s of wall time and 0.0000 CPU seconds" in said
    assert said.endswith(
        "; CPU out of reach at this cycle's size unless the heavy records cost less than Spark alone's."
    )
    throughput["spark_alone_cpu_seconds_per_million_records"] = 5.0 / (4 * 0.173611)
    [_, within] = fleet_rows.reach_lines(fleet, throughput)
    assert within.endswith("0.6000 s of wall time and 0.5000 CPU seconds.")
    goals = fleet_rows.fleet_goal_lines({"archiver-fleet": fleet, "archiver": {"throughput": throughput}})
    assert goals[-1] == within
    assert fleet_rows.reach_lines(fleet, {}) == []


def test_a_fleet_result_of_before_the_rounds_renders_its_single_run_and_no_goals() -> None:
    before = {
        "topics": 100,
        "records_per_topic": 2000,
        "concurrency": 8,
        "fleet_cycle_seconds": 73.4,
        "one_topic": {"seconds": 11.9},
        "B_fleet_ratio": 6.19,
        "B_fleet_ratio_after_start": 13.2,
    }
    assert fleet_rows.fleet_rows({"archiver-fleet": before}) == [
        [
            "B-fleet: 100 topics of 2,000 records each (3 partitions) in one run, 8 at a time",
            "73.4 s",
            "one such topic alone: 11.9 s",
            "6.2 (13.2 after the Spark start)",
        ]
    ]
    assert fleet_rows.fleet_goal_lines({"archiver-fleet": before}) == fleet_rows.fleet_goal_lines({}) == []


def test_the_compactor_row_shows_its_pairs_spread_once_the_result_has_pairs() -> None:
    assert rows.pairs_spread({"ratio_compactor_to_plain_read_write": 1.49}) == ""
    paired = {"ratio_compactor_to_plain_read_write_pairs": [1.56, 1.24, 1.19]}
    paired["ratio_compactor_to_plain_read_write_spread"] = [1.19, 1.56]
    assert rows.pairs_spread(paired) == "median of 3 pairs' ratios, 1.19-1.56; "


def size_result(topics: int, scale: float) -> dict[str, Any]:
    """A fleet size's result as ``fleet_scale`` reads it: every step's figures ``scale`` times those of 10 topics."""
    memory = {"peak_driver_python_rss_mib": 200.0 * scale, "peak_jvm_rss_mib": 700.0}
    step = {"seconds": 10.0 * scale, "cpu_seconds": 20.0 * scale, **memory}
    return {
        "topics": topics,
        "archiver": {**step, "driver_calls": {"s3.PutObject": 30 * scale}, "objects": 70 * scale},
        **{name: {**step, "calls": {"glue.GetPartitions": 10 * scale}} for name in fleet_scale.STEPS[1:]},
    }


def test_a_fleets_heavy_topics_are_one_in_forty_as_in_the_fleet_of_160() -> None:
    assert [fleet_scale.heavy_topics(n) for n in (160, 400, 1600, 16000)] == [4, 10, 40, 400]
    assert fleet_scale.heavy_topics(10) == 1  # never none


def test_per_topic_ratios_set_each_figure_per_topic_at_the_larger_size_against_the_smaller() -> None:
    small, linear = size_result(10, 1.0), size_result(100, 10.0)
    ratios = fleet_scale.per_topic_ratios(small, linear)
    assert list(ratios) == list(fleet_scale.STEPS)
    for figures in ratios.values():  # ten times the topics, ten times the work: 1 per topic
        assert figures["seconds"] == figures["cpu_seconds"] == figures["calls"] == pytest.approx(1.0)
        assert figures["peak_driver_python_rss_mib"] == pytest.approx(10.0)  # peaks as they are, not per topic
        assert figures["peak_jvm_rss_mib"] == pytest.approx(1.0)
    assert fleet_scale.over_bar(ratios) == {}
    faster = size_result(100, 10.0)
    faster["compactor"]["seconds"] = 130.0  # 1.3 per topic
    faster["archiver"]["driver_calls"] = {"s3.PutObject": 330}  # (330 + 700) / 100 against 100 / 10
    over = fleet_scale.over_bar(fleet_scale.per_topic_ratios(small, faster))
    assert over == {"compactor.seconds": pytest.approx(1.3)}  # the archiver's calls, 1.03 per topic: within 1.2


def test_the_archivers_calls_are_its_drivers_and_one_put_per_object_its_executors_wrote() -> None:
    figures = fleet_scale.step_figures("archiver", size_result(10, 1.0)["archiver"])
    assert figures["calls"] == 100
    assert fleet_scale.step_figures("inventory", size_result(10, 2.0)["inventory"])["calls"] == 20


def test_a_larger_fleets_compactor_budget_is_the_inputs_of_as_many_topics_as_the_setting_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet_scale, "COMPACT_TOPICS", 0)
    assert fleet_scale.compact_budget(1600, 10_000) is None  # the job's default budget
    monkeypatch.setattr(fleet_scale, "COMPACT_TOPICS", 160)
    assert fleet_scale.compact_budget(1600, 10_000) == 1000  # a tenth of what 1,600 topics stored
    assert fleet_scale.compact_budget(160, 10_000) is None  # the fleet of that size compacts everything
