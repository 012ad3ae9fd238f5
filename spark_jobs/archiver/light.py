"""Light topics share one pass: the small plans of many topics carried out in one Spark job per round, each topic
still with its own lease, stored plan, receipt, offset commit and audit.

A plan of ``LIGHT_PLAN_RECORDS`` records or more is heavy and its topic carries it out alone
(``spark_jobs.archiver.topic_run.TopicRun.carry_on``), as every plan was before; every lighter plan joins its round's
batch. The batch is one Spark job: the union of each member's own pipeline (``topic_run.plan_outcome``: its own
Kafka read of exactly its ranges, its decode per schema version, its writer with its own layout), so each Spark
task reads one Kafka partition of one topic and writes that topic's objects with the same keys and bytes as a job of
its own would (they depend on the plan and Kafka's records only: a redo after a crash rewrites the same objects).
The union costs no shuffle: it only puts the members' tasks in one stage. Each member is then accounted and
committed on its own (``TopicArchiver.commit_plan``: receipt, offsets, plan cleared).

Isolation, by where a member fails:
- on the driver before the job (registry subject missing, registry down, no pseudonym key): the member is left out
  of the job and fails alone; its plan stays stored for the next run;
- inside the shared Spark job (an object S3 refuses): Spark fails the whole job, so the batch falls back to
  carrying out its members one by one, each in a Spark job of its own; only the failing member fails again. This
  fallback costs the batch's work twice (the members' objects are rewritten, with the same keys and bytes) and a
  Spark job per member, on top of the failed one;
- in its accounting or commit (records unaccounted for, a lost lease, an S3 or Kafka error): that member fails
  alone, after its batch-mates' objects are written.
Poison (records that cannot be decoded) is no failure: it goes to quarantine, as in a plan of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark import RDD
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_jobs.archiver.topic_run import Started, TopicRun, accounted, plan_outcome

LIGHT_PLAN_RECORDS = 50_000
"""A plan with fewer records is light. Below it a plan's fixed cost (its own Spark job, lease writes, receipt,
offset commit: about 1.6 s of run time per plan on 2 cores in the fleet benchmark of issue #37, as much as the
archiver takes for ~140,000 records at its ~90,000 records/s) outweighs its records' work, at most ~0.5 s, less
than a third of it; above it, one member's records would hold its batch-mates' commits back longer than a job of
their own would."""
SCHEDULER_POOL, LIGHT_POOL = "spark.scheduler.pool", "light"
"""The FAIR pool the batches' Spark jobs run in (a topic carried out alone runs in a pool of its own)."""
MEMBER = "_member"
"""The column tagging each outcome row of a batch's job with its member's place in the batch."""

Ended = Callable[[TopicRun, Exception | None], None]
"""What the job does with a topic that is done: ``None`` when every plan committed, else what failed."""
Alone = Callable[[TopicRun, Started], None]
"""Hands a topic whose next plan is heavy over to carry on alone."""


def is_light(started: Started) -> bool:
    return started.plan.records < LIGHT_PLAN_RECORDS


@dataclass(frozen=True)
class Member:
    """A topic's plan in a batch: its run, its started plan, and the plan's Spark work (``plan_outcome``), also
    planned already, as an RDD of its outcome rows tagged with the member's place (``MEMBER``)."""

    topic_run: TopicRun
    started: Started
    outcome: DataFrame
    place: int
    planned: RDD[Row]


class LightBatches:
    """Light topics through a run: round after round, every member's next plan in one Spark job, until each is done
    (``ended``) or its next plan is heavy (``alone``)."""

    def __init__(self, spark: SparkSession, *, ended: Ended, alone: Alone, concurrency: int) -> None:
        self.spark, self.ended, self.alone, self.concurrency = spark, ended, alone, max(1, concurrency)

    def catch_up(self, members: Sequence[tuple[TopicRun, Started]]) -> None:
        """Carry out the members' plans round by round; every topic ends through ``ended`` or ``alone``."""
        while members:
            members = [(run, started) for run in self.round(members) if (started := self.next_plan(run)) is not None]

    def next_plan(self, topic_run: TopicRun) -> Started | None:
        """The topic's next plan when it is light; otherwise the topic is ended or handed over, and None."""
        try:
            started = topic_run.next_plan()
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops its batch-mates
            self.ended(topic_run, exc)
            return None
        if started is None:
            self.ended(topic_run, None)
        elif not is_light(started):
            self.alone(topic_run, started)
            return None
        return started

    def round(self, members: Sequence[tuple[TopicRun, Started]]) -> list[TopicRun]:
        """One batch: the members' plans carried out (one Spark job for those with records), each committed; the
        members that committed (the others ended, failed)."""
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="light") as pool:
            prepared = list(pool.map(self.prepare, members, range(len(members))))
        batch = [m for m in prepared if m is not None]
        try:
            shared: list[list[Row]] | None = self.shared_job(batch)
        except Exception:  # noqa: BLE001 - a member's task failed the shared job: each alone tells which
            shared = None
        committed = []
        for index, member in enumerate(batch):
            try:  # the fallback when the shared job failed: the member's plan in a Spark job of its own
                rows = shared[index] if shared is not None else member.outcome.collect()
                self.commit(member, rows, len(batch) if shared is not None else 1)
                committed.append(member.topic_run)
            except Exception as exc:  # noqa: BLE001 - one topic's failure never stops its batch-mates
                self.ended(member.topic_run, exc)
        for topic_run, started in members:
            if not started.plan.ranges:
                topic_run.record(topic_run.archiver.commit_plan(started.plan, started.summary, []))
                committed.append(topic_run)
        return committed

    def prepare(self, member: tuple[TopicRun, Started], place: int) -> Member | None:
        """The member's Spark work, planned: its registry reads and its Kafka source's offset lookup on the driver,
        done here, ``concurrency`` members at a time, rather than one after another when the shared job is planned
        (measured: 0.16-0.23 s per member); None when it has no records or failed."""
        topic_run, started = member
        if not started.plan.ranges:
            return None
        archiver = topic_run.archiver
        try:
            outcome = plan_outcome(
                archiver.spark,
                archiver.endpoints,
                archiver.topic,
                started.plan,
                access=archiver.access,
                keys=archiver.keys,
                say=archiver.say,
            )
            planned = outcome.withColumn(MEMBER, F.lit(place)).rdd
        except Exception as exc:  # noqa: BLE001 - left out of the job, it fails alone
            self.ended(topic_run, exc)
            return None
        return Member(topic_run, started, outcome, place, planned)

    def shared_job(self, batch: Sequence[Member]) -> list[list[Row]]:
        """The batch's one Spark job: each member's outcome rows, in the batch's order."""
        if not batch:
            return []
        context = self.spark.sparkContext
        pool = context.getLocalProperty(SCHEDULER_POOL)
        context.setLocalProperty(SCHEDULER_POOL, LIGHT_POOL)
        try:
            rows = context.union([m.planned for m in batch]).collect()
        finally:
            context.setLocalProperty(SCHEDULER_POOL, pool)  # type: ignore[arg-type] # None unsets it
        outcomes: dict[int, list[Row]] = {}
        for row in rows:
            outcomes.setdefault(row[MEMBER], []).append(row)
        return [outcomes.get(m.place, []) for m in batch]

    @staticmethod
    def commit(member: Member, outcome: list[Row], shared: int) -> None:
        """The member's outcome accounted (``accounted``) and its plan committed (``TopicArchiver.commit_plan``)."""
        plan, summary = member.started
        summary.shared_job = shared
        archiver = member.topic_run.archiver
        tombstones = accounted(outcome, archiver.endpoints, archiver.topic, summary, archiver.say)
        member.topic_run.record(archiver.commit_plan(plan, summary, tombstones))
