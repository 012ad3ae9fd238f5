"""Freshness as a product figure (issue #37): for each archiver schedule, what the fleet of ``bench.cost`` costs a day
and how long a record takes, at worst, from being produced to being queryable, per table format, beside Kafka
Connect's S3 sink and Firehose from MSK (Amazon MSK's delivery to Amazon S3) buffering as long; and the archiver's
default schedule chosen from it. Pure logic over ``bench.cost``; ``bench.report`` feeds it the newest results
(``python -m bench cost``) and renders it.

Worst case, record produced → queryable (``worst_minutes``), each term from a figure the cost model reads:

- waiting for the archiver: its schedule (times ``Fleet.light_every_runs`` for the light topics): the record lands
  just after its topic's run read the high watermarks;
- the archiver run: ``bench.cost.archive_run``'s wall time, the Spark start (B1's session) and then the run's CPU
  (B1's CPU seconds per million records, the fleet at full size's CPU per topic and run) over the executors at B1's
  utilization; the record's topic may be the run's last;
- **iceberg**: queryable at the archiver's table commit, when its topic's run ends: the two terms above;
- **hive**: queryable once the maintainer has added the object's Glue partition: the two terms above, then the wait
  for the next drain (the maintainer's schedule: the object's event arrives just after a drain's last receive), then
  that drain (``drain_seconds``). Native inference and a crawler's table get their partitions from the maintainer
  alike, so this is the steady state of both; with crawler inference, a new table or schema version waits further
  for a crawler run, which no benchmark measures (the local stack runs no crawlers) and this model does not count.

Not counted in any figure: EMR Serverless's own start of a job run before the Spark session, which the local runner
cannot measure and AWS publishes no figure for without pre-initialized capacity (only pre-initialized workers start
jobs "in seconds": https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/pre-init-capacity.html; the
stack configures none); S3's event delivery to the queue. The rendered section says how many minutes of each goal
the default leaves for them. The dollars are the bill of ``bench.cost``, measured with Hive tables: what an Iceberg
commit costs is not measured yet.

Theirs, buffering as long as our schedule (their prices: ``bench.cost.Prices``):

- Kafka Connect's S3 sink: ``rotate.schedule.interval.ms`` commits each partition's file every interval of wall
  clock (https://docs.confluent.io/kafka-connectors/s3-sink/current/configuration_options.html): at worst one
  interval;
- Firehose from MSK: a buffering interval of 0 to 900 s
  (https://docs.aws.amazon.com/firehose/latest/APIReference/API_BufferingHints.html); with dynamic partitioning,
  which a partitioned layout needs, zero buffering is not available and a batch's end-to-end delay may be 1.5 times
  the interval (https://docs.aws.amazon.com/firehose/latest/dev/buffering.html): at worst 1.5 intervals of at most
  900 s.

Neither adds Glue partitions: their objects are queryable on delivery only to readers that project partitions, or
after a crawler run; their figures are their delivery to S3, a lower bound.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from bench.cost import Fleet, Measured, Prices, archive_run, bills, total

SCHEDULES_MINUTES: Final = (15, 10, 8, 6, 5, 2)
"""The archiver schedules compared: issue #37's four, and 8 and 6 minutes between its 10 (where a run's own minutes
put Iceberg tables past the 10-minute goal) and 5 (where a run every 5 minutes is a day of workers billed their
one-minute minimum)."""
FIREHOSE_MAX_BUFFER_SECONDS: Final = 900
"""Firehose's longest buffering interval (``BufferingHints.IntervalInSeconds``, see the module's docstring)."""
FIREHOSE_PARTITIONED_DELAY: Final = 1.5
"""A dynamically partitioned batch's end-to-end delay, in buffering intervals (see the module's docstring)."""


@dataclass(frozen=True)
class Goals:
    """Issue #37's bars for the default schedules, the maintainer at its default schedule."""

    iceberg_minutes: float = 10
    hive_minutes: float = 20
    dollars_per_day: float = 2.34
    """Today's bill archiving every 15 minutes, as the issue states it (``cost-20261123T223919Z.json``): the new
    default may cost no more."""


@dataclass(frozen=True)
class Option:
    """One pair of schedules: each way's dollars a day and its worst-case minutes from produced to queryable."""

    archive_every_minutes: int
    maintain_every_minutes: int
    dollars_per_day: dict[str, float]
    """Way (``bench.cost.bills``) → its day's total."""
    worst_minutes: dict[str, float]
    """``iceberg`` and ``hive`` (ours), and each other way's delivery (``worst_minutes``)."""

    def meets(self, goals: Goals) -> dict[str, bool]:
        """Each goal met or not; the bill in whole cents, as the goal is stated."""
        return {
            "iceberg": self.worst_minutes["iceberg"] <= goals.iceberg_minutes,
            "hive": self.worst_minutes["hive"] <= goals.hive_minutes,
            "dollars": round(self.dollars_per_day["kafkalake"], 2) <= goals.dollars_per_day,
        }


def drain_seconds(fleet: Fleet, measured: Measured) -> float:
    """One maintainer drain: the events it takes (every object the archiver wrote since the drain before,
    ``Fleet.objects_per_day`` over the day's drains) times the fleet at full size's drain wall seconds per event."""
    events = fleet.objects_per_day(measured.max_records_per_file) / fleet.runs_per_day(fleet.maintain_every_minutes)
    return events * measured.maintainer_wall_seconds_per_event


def worst_minutes(fleet: Fleet, measured: Measured) -> dict[str, float]:
    """Each way's worst case from a record produced to it being queryable (ours) or delivered (theirs), in minutes;
    Connect rotates and Firehose buffers as often as the fleet archives."""
    archived = fleet.archive_every_minutes * fleet.light_every_runs + archive_run(fleet, measured).wall_seconds / 60
    buffered = min(fleet.archive_every_minutes * 60, FIREHOSE_MAX_BUFFER_SECONDS) / 60
    return {
        "iceberg": archived,
        "hive": archived + fleet.maintain_every_minutes + drain_seconds(fleet, measured) / 60,
        "kafka_connect_s3_sink": float(fleet.archive_every_minutes),
        "firehose": FIREHOSE_PARTITIONED_DELAY * buffered,
    }


def option(fleet: Fleet, measured: Measured, prices: Prices) -> Option:
    return Option(
        fleet.archive_every_minutes,
        fleet.maintain_every_minutes,
        {way: total(lines) for way, lines in bills(fleet, measured, prices).items()},
        worst_minutes(fleet, measured),
    )


def choose(options: list[Option], goals: Goals, shortest: int) -> tuple[Option, str]:
    """The default archiver schedule among ``options`` an environment may set (``shortest`` minutes or longer), and
    why: the cheapest that meets every goal; when none does, the cheapest that meets both freshness goals, freshness
    being what the product is weighed on (its bill then misses the dollar goal); when none does either, the one
    freshest for Hive tables."""
    allowed = [o for o in options if o.archive_every_minutes >= shortest]
    fresh = [o for o in allowed if all(met for goal, met in o.meets(goals).items() if goal != "dollars")]
    affordable = [o for o in fresh if o.meets(goals)["dollars"]]
    if affordable:
        return min(affordable, key=_dollars), "every goal"
    if fresh:
        return min(fresh, key=_dollars), "freshness goals"
    return min(allowed, key=lambda o: o.worst_minutes["hive"]), "freshest"


def _dollars(option: Option) -> float:
    return option.dollars_per_day["kafkalake"]


def compare(fleet: Fleet, measured: Measured, prices: Prices, shortest: int, faster_maintainer: int) -> dict[str, Any]:
    """Every schedule of SCHEDULES_MINUTES at the fleet's maintainer schedule, the default chosen among those the
    setting allows (``shortest`` minutes or longer), and the default with the maintainer every ``faster_maintainer``
    minutes: what a faster maintainer buys."""
    goals = Goals()
    options = [option(replace(fleet, archive_every_minutes=m), measured, prices) for m in SCHEDULES_MINUTES]
    chosen, why = choose(options, goals, shortest)
    faster = replace(
        fleet, archive_every_minutes=chosen.archive_every_minutes, maintain_every_minutes=faster_maintainer
    )
    return {
        "goals": asdict(goals),
        "shortest_allowed_minutes": shortest,
        "options": [{**asdict(o), "meets": o.meets(goals)} for o in options],
        "chosen": {**asdict(chosen), "meets": chosen.meets(goals), "because": why},
        "faster_maintainer": asdict(option(faster, measured, prices)),
    }
