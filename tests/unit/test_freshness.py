"""Freshness per archiver schedule (``bench.freshness``): the worst cases per table format and way, the choice of the
default schedule, and the README section and the settings that follow from the adopted cost result."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from bench import cost, freshness, report
from infra.repo import REPO_ROOT
from kafkalake.environments import ARCHIVER_SCHEDULE_MINIMUM_MINUTES, EnvironmentConfig, load_environments
from tests.unit.test_bench import MEASURED

FLEET = cost.Fleet()


def test_iceberg_is_queryable_before_hive_by_the_maintainers_wait_and_drain() -> None:
    for minutes in freshness.SCHEDULES_MINUTES:
        fleet = replace(FLEET, archive_every_minutes=minutes)
        worst = freshness.worst_minutes(fleet, MEASURED)
        run = cost.archive_run(fleet, MEASURED).wall_seconds / 60
        assert worst["iceberg"] == pytest.approx(minutes + run)
        drain = freshness.drain_seconds(fleet, MEASURED) / 60
        assert 0 < drain < fleet.maintain_every_minutes
        assert worst["hive"] == pytest.approx(worst["iceberg"] + fleet.maintain_every_minutes + drain)


def test_a_drain_takes_every_object_written_since_the_last_at_the_measured_seconds_per_event() -> None:
    objects = FLEET.objects_per_run(MEASURED.max_records_per_file) * FLEET.maintain_every_minutes / 15
    assert freshness.drain_seconds(FLEET, MEASURED) == pytest.approx(objects * 0.05)
    slower = replace(MEASURED, maintainer_wall_seconds_per_event=0.1)
    assert freshness.drain_seconds(FLEET, slower) == pytest.approx(2 * freshness.drain_seconds(FLEET, MEASURED))


def test_light_topics_archived_every_few_runs_wait_that_many_schedules() -> None:
    hourly = replace(FLEET, light_every_runs=4)
    run = cost.archive_run(hourly, MEASURED).wall_seconds / 60
    assert freshness.worst_minutes(hourly, MEASURED)["iceberg"] == pytest.approx(60 + run)


def test_a_shorter_schedule_is_fresher_and_costs_more() -> None:
    options = [
        freshness.option(replace(FLEET, archive_every_minutes=m), MEASURED, cost.Prices())
        for m in sorted(freshness.SCHEDULES_MINUTES, reverse=True)
    ]
    for longer, shorter in pairwise(options):
        for way in longer.worst_minutes:
            assert shorter.worst_minutes[way] < longer.worst_minutes[way], way
        assert shorter.dollars_per_day["kafkalake"] > longer.dollars_per_day["kafkalake"]
    faster = replace(FLEET, maintain_every_minutes=6)
    assert freshness.worst_minutes(faster, MEASURED)["hive"] < freshness.worst_minutes(FLEET, MEASURED)["hive"]
    assert freshness.worst_minutes(faster, MEASURED)["iceberg"] == freshness.worst_minutes(FLEET, MEASURED)["iceberg"]


def test_firehose_buffers_at_most_fifteen_minutes_and_delivers_within_one_and_a_half_buffers() -> None:
    assert freshness.worst_minutes(replace(FLEET, archive_every_minutes=10), MEASURED)["firehose"] == 15
    assert freshness.worst_minutes(replace(FLEET, archive_every_minutes=30), MEASURED)["firehose"] == 22.5
    assert freshness.worst_minutes(replace(FLEET, archive_every_minutes=30), MEASURED)["kafka_connect_s3_sink"] == 30


def option(every: int, dollars: float, iceberg: float, hive: float) -> freshness.Option:
    return freshness.Option(every, 10, {"kafkalake": dollars}, {"iceberg": iceberg, "hive": hive})


GOALS = freshness.Goals(iceberg_minutes=10, hive_minutes=20, dollars_per_day=3.0)


def test_the_default_is_the_cheapest_schedule_that_meets_every_goal() -> None:
    options = [option(15, 2.0, 17, 27), option(10, 2.9, 9.9, 19.9), option(5, 2.5, 7, 18), option(2, 9, 4, 17)]
    assert freshness.choose(options, GOALS, shortest=5) == (options[2], "every goal")
    assert option(10, 3.004, 9, 19).meets(GOALS)["dollars"], "the bill in whole cents, as the goal is stated"


def test_without_one_in_budget_the_default_is_the_cheapest_that_meets_the_freshness_goals() -> None:
    options = [option(15, 2.0, 17, 27), option(10, 3.5, 11, 22), option(5, 5.0, 7, 18), option(2, 9, 4, 17)]
    assert freshness.choose(options, GOALS, shortest=5) == (options[2], "freshness goals")


def test_a_schedule_the_setting_refuses_is_never_the_default() -> None:
    options = [option(15, 2.0, 17, 27), option(5, 5.0, 7, 21), option(2, 2.5, 4, 17)]
    assert freshness.choose(options, GOALS, shortest=5) == (options[1], "freshest")
    assert freshness.choose(options, GOALS, shortest=2) == (options[2], "every goal")


def test_the_default_schedules_are_the_ones_the_adopted_cost_result_chose() -> None:
    compared = report.adopted()["cost"]["schedules"]
    chosen = compared["chosen"]
    defaults = EnvironmentConfig.model_fields
    assert defaults["archiver_schedule_minutes"].default == chosen["archive_every_minutes"]
    assert defaults["maintainer_schedule_minutes"].default == chosen["maintain_every_minutes"]
    assert cost.Fleet().maintain_every_minutes == chosen["maintain_every_minutes"]
    assert compared["shortest_allowed_minutes"] == ARCHIVER_SCHEDULE_MINIMUM_MINUTES
    assert compared["faster_maintainer"]["maintain_every_minutes"] == report.fastest_maintainer_minutes()
    for name, settings in load_environments(REPO_ROOT / "environments.yaml").items():
        assert settings.archiver_schedule_minutes == chosen["archive_every_minutes"], name
        assert settings.maintainer_schedule_minutes == chosen["maintain_every_minutes"], name


def test_the_adopted_choice_is_what_the_model_chooses_from_the_adopted_measurements() -> None:
    adopted = report.adopted()
    inputs = report.measured({name: adopted[name] for name in report.COST_INPUTS})
    compared = freshness.compare(
        FLEET, inputs, cost.Prices(), ARCHIVER_SCHEDULE_MINIMUM_MINUTES, report.fastest_maintainer_minutes()
    )
    assert compared == adopted["cost"]["schedules"]


def test_the_fastest_maintainer_is_the_first_minute_past_the_default_timeout() -> None:
    assert report.fastest_maintainer_minutes() == 6
    with pytest.raises(ValueError, match="must exceed the timeout"):
        EnvironmentConfig(
            name="x",
            bucket="b",
            queue_name="q",
            dead_letter_queue_name="d",
            event_bus_name="e",
            maintainer_schedule_minutes=5,
        )


def test_the_readme_freshness_section_is_what_the_adopted_results_render() -> None:
    readme = report.README.read_text()
    assert report.section(readme, report.README_BEGIN, report.README_END) == report.render_readme(report.adopted())
