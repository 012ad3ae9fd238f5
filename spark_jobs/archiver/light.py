"""Light topics share one pass: the small plans of many topics carried out in one Spark job per round, each topic
still with its own lease, stored plan, receipt, offset commit and audit.

A plan of ``LIGHT_PLAN_RECORDS`` records or more is heavy and its topic carries it out alone
(``spark_jobs.archiver.topic_run.TopicRun.carry_on``); every lighter plan joins its round's pass. The pass is one Spark
job over one Kafka read of every member's ranges (``spark_jobs.archiver.records``): each row is tagged with its
member, the members' records are decoded together (one column per distinct schema and protection, so topics of one
schema share one decode), and the writer splits its output by member as it does by Kafka partition and hour, each
member with its own layout, so its objects have the same keys and bytes as a job of its own would write (they depend
on the plan and Kafka's records only: a redo after a crash rewrites the same objects). The pass runs in a task per
50,000 records, as many as the session has cores at most, each reading its Kafka partitions with one consumer
(``spark_jobs.archiver.task_reader``), not a task and a consumer per Kafka partition (``topic_run.pass_outcome``).
A pass holds at most ``MAX_PASS_COLUMNS`` distinct decodings, and only topics that hash the same Kafka columns (a
hashed key is text, a clear one bytes), so a round of many schemas or both kinds of key is a few passes. Each member
is then accounted and committed on its own (``TopicArchiver.commit_plan``: receipt, offsets, plan cleared),
``request_threads`` at a time (``kafkalake.jobspec.ARCHIVER_REQUEST_THREADS``).

Isolation, by where a member fails:
- on the driver before the pass (registry subject missing, registry down): the member is left out of the pass and
  fails alone; its plan stays stored for the next run;
- inside the pass's Spark job (an object S3 refuses, a Kafka read that fails): Spark fails the whole job, so the pass
  falls back to carrying out its members one by one, each in a Spark job of its own; only the failing member fails
  again. This fallback costs the pass's work twice (the members' objects are rewritten, with the same keys and
  bytes) and a Spark job per member, on top of the failed one;
- in its accounting or commit (records unaccounted for, a lost lease, an S3 or Kafka error): that member fails
  alone, after its pass-mates' objects are written.
Poison (records that cannot be decoded) is no failure: it goes to quarantine with its raw bytes and offsets, as in a
plan of its own, and the plan commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import Row, SparkSession

from spark_jobs.archiver.records import PassMember, hashed_kafka_columns, pass_columns
from spark_jobs.archiver.topic_run import Started, TopicRun, accounted, pass_member, pass_outcome

LIGHT_PLAN_RECORDS = 50_000
"""A plan with fewer records is light. Below it a plan's fixed cost (its own Spark job, lease writes, receipt,
offset commit: about 1.6 s of run time per plan on 2 cores in the fleet benchmark of issue #37, as much as the
archiver takes for ~140,000 records at its ~90,000 records/s) outweighs its records' work, at most ~0.5 s, less
than a third of it; above it, one member's records would hold its pass-mates' commits back longer than a job of
their own would."""
MAX_PASS_COLUMNS = 64
"""The most distinct decodings (value columns) one pass holds: every row carries every column of its pass (null but
its own), so a pass of many schemas is split into a few."""
SCHEDULER_POOL, LIGHT_POOL = "spark.scheduler.pool", "light"
"""The FAIR pool the passes' Spark jobs run in (a topic carried out alone runs in a pool of its own)."""

Ended = Callable[[TopicRun, Exception | None], None]
"""What the job does with a topic that is done: ``None`` when every plan committed, else what failed."""
Alone = Callable[[TopicRun, Started], None]
"""Hands a topic whose next plan is heavy over to carry on alone."""


def is_light(started: Started) -> bool:
    return started.plan.records < LIGHT_PLAN_RECORDS


@dataclass(frozen=True)
class Member:
    """A topic's started plan in a round, with its pass member (its schema versions read)."""

    topic_run: TopicRun
    started: Started
    member: PassMember


def passes(members: Sequence[Member], width: int = MAX_PASS_COLUMNS) -> list[list[Member]]:
    """The round's members in passes, in order: those that hash the same Kafka columns together
    (``records.hashed_kafka_columns``), at most ``width`` distinct decodings each; a ``key_format`` topic alone
    (its ``_key`` is its own key schema's type)."""
    kinds: dict[tuple[str, ...], list[list[Member]]] = {}
    for member in members:
        topic = member.member.topic
        kind = (*hashed_kafka_columns(topic), *([topic.kafka_topic] if member.member.key_versions else []))
        found = kinds.setdefault(kind, [[]])
        if found[-1] and len(set(_columns([*found[-1], member]))) > width:
            found.append([])
        found[-1].append(member)
    return [p for found in kinds.values() for p in found if p]


def _columns(members: Sequence[Member]) -> list[str]:
    return [c for mine in pass_columns([m.member for m in members]) for c in mine.values()]


class LightBatches:
    """Light topics through a run: round after round, every member's next plan in one pass, until each is done
    (``ended``) or its next plan is heavy (``alone``)."""

    def __init__(self, spark: SparkSession, *, ended: Ended, alone: Alone, request_threads: int) -> None:
        self.spark, self.ended, self.alone, self.request_threads = spark, ended, alone, max(1, request_threads)

    def catch_up(self, members: Sequence[tuple[TopicRun, Started]]) -> None:
        """Carry out the members' plans round by round, their requests ``request_threads`` at a time; every topic
        ends through ``ended`` or ``alone``."""
        with ThreadPoolExecutor(max_workers=self.request_threads, thread_name_prefix="light") as pool:
            while members:
                committed = self.round(members, pool)
                found = pool.map(self.next_plan, committed)
                members = [(run, started) for run, started in zip(committed, found, strict=True) if started is not None]

    def next_plan(self, topic_run: TopicRun) -> Started | None:
        """The topic's next plan when it is light; otherwise the topic is ended or handed over, and None."""
        try:
            started = topic_run.next_plan()
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops its pass-mates
            self.ended(topic_run, exc)
            return None
        if started is None:
            self.ended(topic_run, None)
        elif not is_light(started):
            self.alone(topic_run, started)
            return None
        return started

    def round(self, members: Sequence[tuple[TopicRun, Started]], pool: ThreadPoolExecutor) -> list[TopicRun]:
        """One round: the members' plans carried out (one pass for those with records, or a few), each committed;
        the members that committed (the others ended, failed)."""
        prepared = list(pool.map(self.prepare, members))
        batch = [m for m in prepared if m is not None]
        outcomes: list[tuple[Member, list[Row] | None, int]] = []
        for one_pass in passes(batch):
            outcomes += self.shared_job(one_pass)
        committed = [ok for ok in pool.map(lambda found: self.commit(*found), outcomes) if ok is not None]
        empty = [(run, started) for run, started in members if not started.plan.ranges]
        for topic_run, started in empty:
            try:
                topic_run.commit(started, [])
                committed.append(topic_run)
            except Exception as exc:  # noqa: BLE001 - one topic's failure never stops its pass-mates
                self.ended(topic_run, exc)
        return committed

    def prepare(self, member: tuple[TopicRun, Started]) -> Member | None:
        """The member's schema versions read from the registry, on the driver, ``request_threads`` members at a time;
        None when it has no records or failed (left out of the pass, it fails alone)."""
        topic_run, started = member
        if not started.plan.ranges:
            return None
        archiver = topic_run.archiver
        try:
            found = pass_member(
                archiver.endpoints,
                archiver.topic,
                started.plan,
                access=archiver.access,
                keys=archiver.keys,
                say=archiver.say,
            )
        except Exception as exc:  # noqa: BLE001 - left out of the pass, it fails alone
            self.ended(topic_run, exc)
            return None
        return Member(topic_run, started, found)

    def shared_job(self, members: Sequence[Member]) -> list[tuple[Member, list[Row] | None, int]]:
        """The pass's one Spark job: each member with its outcome rows (a task's timings and retries counted on the
        first member's), and how many plans the job carried out; None rows when the job failed (each member is then
        carried out alone)."""
        context = self.spark.sparkContext
        pool = context.getLocalProperty(SCHEDULER_POOL)
        context.setLocalProperty(SCHEDULER_POOL, LIGHT_POOL)
        first = members[0].topic_run.archiver
        keys = next((m.topic_run.archiver.keys for m in members if m.topic_run.archiver.keys is not None), None)
        try:
            outcome = pass_outcome(
                self.spark, first.endpoints, [m.member for m in members], access=first.access, keys=keys, light=True
            ).collect()
        except Exception:  # noqa: BLE001 - a member's task failed the shared job: each alone tells which
            return [(m, None, 1) for m in members]
        finally:
            context.setLocalProperty(SCHEDULER_POOL, pool)  # type: ignore[arg-type] # None unsets it
        rows: dict[int, list[Row]] = {}
        for row in outcome:
            rows.setdefault(row["member"] or 0, []).append(row)
        return [(m, rows.get(place, []), len(members)) for place, m in enumerate(members)]

    def commit(self, member: Member, outcome: list[Row] | None, shared: int) -> TopicRun | None:
        """The member's outcome accounted (``accounted``) and its plan committed (``TopicArchiver.commit_plan``), or,
        when its pass failed, its plan carried out alone and committed; None when it failed."""
        summary = member.started.summary
        archiver = member.topic_run.archiver
        try:
            if outcome is None:
                member.topic_run.complete(member.started)
                return member.topic_run
            summary.shared_job = shared
            tombstones = accounted(outcome, archiver.endpoints, archiver.topic, summary, archiver.say)
            member.topic_run.commit(member.started, tombstones)
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops its pass-mates
            self.ended(member.topic_run, exc)
            return None
        return member.topic_run
