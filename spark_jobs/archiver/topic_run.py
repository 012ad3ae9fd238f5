"""One topic through an archiver run, top to bottom: ``catch_up`` takes the topic's lease and carries out plans until
the topic reaches the high watermark seen when it started; ``TopicArchiver.run_plan`` carries out one plan (stored
plan → ``carry_out`` → receipt → offset commit → plan cleared); ``carry_out`` is the plan's one Spark job (records
→ writer → accounts). ``spark_jobs.archiver.job`` runs many topics at once.

Exactly once, also when runs overlap: a run first takes the topic's lease (``kafkalake.lease``); a topic another
live run holds is skipped and reported (``held by run <id> since <time>``), a stale lease is taken over and its
stored plan redone. The plan (``spark_jobs.archiver.plan``) is stored in the lease before anything is written;
object keys and bytes depend only on the plan and Kafka's immutable records, so a redo rewrites the same objects.
Offsets (``spark_jobs.archiver.offsets``) are committed only after every object and the plan's receipt are in S3;
then the plan is cleared. Storing and clearing are conditional on still holding the lease, so a run that lost it
stops at its next step.

Each plan is one pass over its records, in a Spark job of its own (``carry_out``) or, a light topic's, in one shared
with other light topics' plans (``spark_jobs.archiver.light``): read, classified, decoded and timed
(``spark_jobs.archiver.records``), then routed by the writer (``spark_jobs.archiver.writer``) to data, delete-log
and quarantine objects, with the counts taken on the way (``spark_jobs.archiver.summary``). Nothing is cached,
sorted or shuffled in Spark.

Past 400 lines on purpose: one topic's way through a run (lease, plan, pass, accounting, commit) reads top to bottom
here, and the crash tests patch its steps (``carry_out``, ``PlanWriter``) in this one module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, Row, SparkSession

from kafkalake.aws import ClientShare, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, tombstone_request
from kafkalake.iceberg import table_catalog, table_location
from kafkalake.kafka_access import KafkaAccess, kafka_access
from kafkalake.lease import Held, Lease, LeaseLost, quiet_spell
from kafkalake.naming import consumer_group
from kafkalake.personal import KEY_ID_COLUMN, Keyring, needs_key
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import StoredAs, TableFormat, TableMode
from kafkalake.undeclared import UNDECLARED_VERSION
from spark_jobs.archiver import transform
from spark_jobs.archiver.offsets import KafkaState, OffsetClients, Offsets
from spark_jobs.archiver.plan import Plan, PlanLease, finished, plan_ranges, plan_work, resume_from, stored_plan
from spark_jobs.archiver.records import PassMember, key_versions, pass_columns, pass_records, version_schemas
from spark_jobs.archiver.summary import Summary, TopicResult, account, receipt
from spark_jobs.archiver.table_commit import PlanFiles, append_plan, upsert_plan
from spark_jobs.archiver.upsert import Keying
from spark_jobs.archiver.writer import ERASE, OUTCOME_SCHEMA, PlanLayout, PlanWriter
from spark_jobs.common import Run

Tombstone = tuple[dict[str, str], int, int]
"""A tombstone of a ``by_key`` topic: key id → the digest of its Kafka key under that key, Kafka partition, offset."""


class Started(NamedTuple):
    """A plan stored in the topic's lease and not yet carried out, with its summary so far."""

    plan: Plan
    summary: Summary


def catch_up(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    deadline: float,
    run: Run | None = None,
    keys: Keyring | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> TopicResult:
    """Plans one after another until the topic reaches the high watermark seen at the start, or ``deadline``
    (``time.monotonic()``) passes; memory stays bounded by the per-plan record limit. A topic another run holds is
    skipped (``TopicResult.skipped``). ``keys``: the current one hashes the topic's personal fields, each digests
    its tombstones' keys."""
    with TopicRun(TopicArchiver(spark, endpoints, topic, keys=keys, now=now, say=say), deadline) as topic_run:
        if topic_run.open(run or Run.new(spark)):
            topic_run.carry_on(topic_run.next_plan())
    return topic_run.result


class TopicRun:
    """One topic's way through a run: its lease taken (``open``), then its plans one after another (``next_plan``,
    carried out alone by ``carry_on`` or with other topics' by ``spark_jobs.archiver.light``, each committed with
    ``TopicArchiver.commit_plan`` and recorded) until it reaches the high watermark seen when it took the lease, or
    ``deadline`` (``time.monotonic()``) passes; leaving the block releases the lease (a plan that failed stays
    stored in it) and reports the lag."""

    def __init__(self, archiver: TopicArchiver, deadline: float) -> None:
        self.archiver, self.deadline = archiver, deadline
        self.result = TopicResult(archiver.topic.name, archiver.topic.kafka_topic)
        self.started = time.monotonic()
        self._held = ExitStack()
        self._lease: Lease | None = None
        self._target: dict[int, int] = {}
        self._position: dict[int, int] = {}

    def __enter__(self) -> TopicRun:
        return self

    def open(self, run: Run) -> bool:
        """Take the topic's lease and read where the topic stands; False when another run holds it (skipped)."""
        try:
            self._lease = self._held.enter_context(self.archiver.holding(run))
        except Held as held:
            self.result.skipped = str(held)
            self.archiver.say(f"{self.archiver.topic.kafka_topic}: skipped: {held}")
            return False
        committed, low, self._target = self.archiver.taken_at
        self._position = {p: committed.get(p) or low[p] for p in self._target}
        return True

    def next_plan(self) -> Started | None:
        """The topic's next plan, stored in its lease (``TopicArchiver.start_plan``); None once the last plan was
        empty, the topic reached its target or the deadline passed."""
        if self.result.plans and (not self.result.plans[-1].plan or self._ends(self._position)):
            return None
        return self.archiver.start_plan(ceiling=self._target)

    def _ends(self, position: Mapping[int, int]) -> bool:
        """Whether the run ends for the topic at ``position``: it reached the target, or the deadline passed."""
        return all(position[p] >= t for p, t in self._target.items()) or time.monotonic() >= self.deadline

    def record(self, summary: Summary) -> None:
        """A committed plan: the topic's position moves to its ends."""
        self.result.plans.append(summary)
        self._position |= {p: end for p, (_, end) in summary.plan.items()}

    def last(self, plan: Plan) -> bool:
        """Whether ``plan`` is the topic's last in this run (``next_plan`` will find none after it): it reaches the
        target, or the deadline passed. Its commit then releases the lease in the same write."""
        return self._ends({**self._position, **{p: end for p, (_, end) in plan.ranges.items()}})

    def complete(self, started: Started) -> None:
        """``started`` carried out alone, in a Spark job of its own (``TopicArchiver.complete``), committed and
        recorded."""
        self.record(self.archiver.complete(started, last=self.last(started.plan)))

    def commit(self, started: Started, tombstones: list[Tombstone]) -> None:
        """``started``, carried out in a pass, committed (``TopicArchiver.commit_plan``) and recorded."""
        plan, summary = started
        self.record(self.archiver.commit_plan(plan, summary, tombstones, last=self.last(plan)))

    def carry_on(self, started: Started | None) -> None:
        """``started`` and every next plan, each carried out alone and committed."""
        while started is not None:
            self.complete(started)
            started = self.next_plan()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close(failed=kind is not None)

    def close(self, *, failed: bool = False) -> TopicResult:
        """Release the lease (a plan that ``failed`` stays stored in it) and report the topic's lag (not when it
        failed or was skipped)."""
        try:
            self._held.close()
            if self._lease is not None and not failed:
                self.result.lease_requests = self._lease.requests + 2  # the read and the write that took it
                self.result.lag = self.archiver.lag()
        finally:
            self.archiver.close()
            self.result.driver_s3_retries = self.archiver.s3_retries.total
            self.result.seconds = time.monotonic() - self.started
        return self.result


def run_access(endpoints: Endpoints) -> KafkaAccess:
    """How the run reaches Kafka and the registry (the Kafka secret read once): shared by its topics."""
    secrets = make_client(endpoints, "secretsmanager") if endpoints.kafka_secret_arn else None
    return kafka_access(endpoints, secrets)


class TopicArchiver:
    """One topic's offsets, plan store and Kafka/registry access (through ``clients``: the run's, made over
    ``run_access``; its own when None), and the keys of its pseudonyms, for one or more plans in a row. Its S3 calls go
    through ``s3`` (the run's client; its own when None), counted as its own (``ClientShare``)."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        topic: Topic,
        *,
        keys: Keyring | None = None,
        clients: OffsetClients | None = None,
        s3: Any | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        say: Callable[[str], None] = print,
    ) -> None:
        self.spark, self.endpoints, self.topic, self.now, self.say = spark, endpoints, topic, now, say
        self.keys = keys
        self.s3 = ClientShare(s3 or make_client(endpoints, "s3"))
        self.s3_retries = self.s3.retries
        self._own_clients = clients is None
        self.clients = clients or OffsetClients(run_access(endpoints))
        self.access = self.clients.access
        self.offsets = Offsets(self.clients, topic.kafka_topic)
        self.lease_key = topic.prefix.archive_lease_key()
        self._plans: PlanLease | None = None
        self.taken_at: KafkaState = ({}, {}, {})
        """Where the topic stood in Kafka when this run took its lease (``Offsets.state``)."""
        self._first: Plan | None = None
        """The plan the write that took the lease stored, until ``start_plan`` starts it."""

    def close(self) -> None:
        if self._own_clients:
            self.clients.close()

    @contextmanager
    def holding(self, run: Run) -> Iterator[Lease]:
        """The topic's lease for ``run``, taken with the run's first plan stored in the same write (``taking``),
        renewed in the background until the block ends, then released unless the last plan's clear released it (a
        plan that failed stays stored in it for the next run to redo)."""
        bucket, key = self.endpoints.bucket, self.lease_key
        lease = Lease.acquire(self.s3, bucket, key, run.run_id, ttl=run.lease_ttl, now=self.now, work=self.taking)
        self._plans = PlanLease(lease)
        try:
            self._group_forward(self.taken_at[0], self._plans.finished())
            with lease.kept_alive(quiet_spell(run.lease_ttl)):
                yield lease
        finally:
            self._plans = None
            try:
                lease.release()
            except LeaseLost as lost:
                self.say(f"{self.topic.kafka_topic}: {lost}")

    @property
    def plans(self) -> PlanLease:
        if self._plans is None:
            raise RuntimeError(f"{self.topic.kafka_topic}: plans are carried out only while holding the topic's lease")
        return self._plans

    def run_plan(self, ceiling: dict[int, int] | None = None) -> Summary:
        """Carry out the topic's stored plan, or a new one up to ``ceiling``; then commit and delete the plan."""
        return self.complete(self.start_plan(ceiling))

    def taking(self, work: dict[str, Any] | None) -> dict[str, Any] | None:
        """The lease's work as this run takes it (``Lease.acquire``): where the topic stands is read
        (``taken_at``) and, when no plan is stored for a redo, the first plan up to the high watermark is stored by
        the write that takes the lease, one write instead of two."""
        self.taken_at, self._first = self.offsets.state(), None
        if stored_plan(work) is not None:
            return work
        plan = self._planned(self.taken_at, finished(work), None)
        if not plan.ranges:
            return work
        self._first = plan
        return plan_work(plan, finished(work))

    def start_plan(self, ceiling: dict[int, int] | None = None) -> Started:
        """The topic's stored plan (this run's first, stored as it took the lease, or one left to redo), or a new one
        up to ``ceiling`` stored before anything of it is written."""
        topic, started = self.topic, time.monotonic()
        stored = self.plans.stored_plan()
        redone = stored is not None and stored != self._first
        self._first = None
        plan = stored or self.new_plan(ceiling)
        if stored is None and plan.ranges:
            self.plans.store(plan)
        summary = Summary(
            topic.kafka_topic,
            plan.ranges,
            redone_plan=redone,
            timings={"plan": time.monotonic() - started},
            started=started,
        )
        self.say(
            f"{topic.kafka_topic}: {'redoing stored' if redone else 'new'} plan of {plan.records} records "
            f"{ {p: list(r) for p, r in plan.ranges.items()} } (s3://{self.endpoints.bucket}/{self.lease_key})"
        )
        return Started(plan, summary)

    def complete(self, started: Started, *, last: bool = False) -> Summary:
        """Carry out a started plan alone, in a Spark job of its own (``carry_out``), and commit it (``last``: see
        ``commit_plan``)."""
        plan, summary = started
        tombstones: list[Tombstone] = []
        if plan.ranges:
            tombstones = carry_out(
                self.spark, self.endpoints, self.topic, plan, summary, access=self.access, keys=self.keys, say=self.say
            )
        return self.commit_plan(plan, summary, tombstones, last=last)

    def commit_plan(self, plan: Plan, summary: Summary, tombstones: list[Tombstone], *, last: bool = False) -> Summary:
        """The carried-out plan's commit: its erasure request, its receipt, its offsets, the plan cleared (and, when
        it is the run's ``last`` plan of the topic, the lease released in the same write)."""
        topic = self.topic
        with summary.phase("commit"):
            if plan.ranges:
                if tombstones and self.keys is not None:
                    self._request_erasure(plan, tombstones, self.keys.current.key_id)
                if topic.spec.table_format == TableFormat.ICEBERG:
                    self._commit_table(plan, summary)
                body = receipt(topic, plan, summary).to_json().encode()
                self.s3.put_object(Bucket=self.endpoints.bucket, Key=topic.prefix.receipt_key(plan.plan_id), Body=body)
                self.offsets.commit(plan.ranges)
                self.plans.finish(plan, release=last)
        ends = ", ".join(f"{p}: {e}" for p, (_, e) in plan.ranges.items())
        self.say(f"{topic.kafka_topic}: committed offsets {{{ends}}} for group {consumer_group(topic.kafka_topic)}")
        summary.seconds = time.monotonic() - summary.started
        return summary

    def _commit_table(self, plan: Plan, summary: Summary) -> None:
        """An Iceberg topic's plan committed to its table, once, before its receipt and offsets: its files appended,
        or an upsert table's changes applied (its change objects, which the table does not reference, are the
        compactor's to remove after ``kafkalake.iceberg.ORPHAN_AGE``, as every unreferenced file: the archiver deletes
        nothing)."""
        topic, bucket = self.topic, self.endpoints.bucket
        files = [f"s3://{bucket}/{o.key}" for o in summary.stored]
        if not files:
            self.say(
                f"{topic.kafka_topic}: Iceberg table {topic.database}.{topic.table} had no data files for plan "
                f"{plan.plan_id}"
            )
            return
        identifier, table = (topic.database, topic.table), f"{topic.database}.{topic.table}"
        catalog, location = table_catalog(self.endpoints), table_location(bucket, topic.prefix)
        plan_files = PlanFiles(
            location=location,
            plan_id=plan.plan_id,
            kafka_topic=topic.kafka_topic,
            ranges=plan.ranges,
            files=files,
            say=self.say,
        )
        if topic.spec.mode == TableMode.APPEND:
            appended = append_plan(catalog, identifier, **plan_files)
            done = "appended" if appended else "already held"
        else:
            change = upsert_plan(catalog, identifier, keying=Keying.of(topic), **plan_files)
            done = (
                f"upserted {change.rows.num_rows} rows and deleted {change.deletes} keys of"
                if change
                else "already held"
            )
        self.say(f"{topic.kafka_topic}: Iceberg table {table} {done} plan {plan.plan_id}")

    def _request_erasure(self, plan: Plan, tombstones: list[Tombstone], key_id: str) -> None:
        """The plan's tombstones as an erasure request, stored before the plan's receipt and offsets (a redo of the
        plan stores the same request)."""
        topic = self.topic
        table = f"{topic.database}.{topic.table}"
        within = topic.spec.erasure_within_days
        request = tombstone_request(table, plan.plan_id, plan.created_at, tombstones, within_days=within, key_id=key_id)
        stored = RequestStore(self.s3, self.endpoints.bucket, topic.env).put(request)
        self.say(f"{topic.kafka_topic}: {len(request.subjects)} tombstoned keys requested for erasure ({stored})")

    def new_plan(self, ceiling: dict[int, int] | None) -> Plan:
        """A plan from where the topic stands now (``_planned``); a group commit behind the lease's record is moved
        forward first."""
        state, reached = self.offsets.state(), self.plans.finished()
        self._group_forward(state[0], reached)
        return self._planned(state, reached, ceiling)

    def _group_forward(self, kafka: dict[int, int | None], reached: dict[int, int]) -> None:
        """The group's commit moved forward to where the lease records finished plans reached, where it is behind."""
        committed = resume_from(kafka, reached)
        if committed != kafka:
            self.offsets.commit({p: (0, end) for p, end in committed.items() if end is not None})

    def _planned(self, state: KafkaState, reached: dict[int, int], ceiling: dict[int, int] | None) -> Plan:
        """From where finished plans ``reached`` (the lease's record, or the group's commit when that is higher) up
        to the high watermark, or ``ceiling``."""
        kafka, low, high = state
        committed = resume_from(kafka, reached)
        if ceiling is not None:
            high = {p: min(h, ceiling.get(p, h)) for p, h in high.items()}
        archive = self.topic.spec.archive
        ranges = plan_ranges(
            committed,
            low,
            high,
            max_records=archive.max_records_per_run,
            accept_data_loss=archive.accept_data_loss,
            topic=self.topic.kafka_topic,
        )
        return Plan(self.topic.kafka_topic, self.now().isoformat(), ranges)

    def lag(self) -> dict[int, int]:
        """High watermark - committed offset (from the earliest retained offset when none is committed)."""
        committed, low, high = self.offsets.state()
        return {p: max(0, high[p] - (committed.get(p) or low[p])) for p in high}


def carry_out(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    plan: Plan,
    summary: Summary,
    *,
    access: KafkaAccess,
    keys: Keyring | None,
    say: Callable[[str], None],
) -> list[Tombstone]:
    """One Spark job, a pass of the plan alone: read the plan's records, decode them, protect their personal fields
    (with the current key), write data and quarantine objects; then check every record is accounted for. Returns the
    tombstones of a ``by_key`` topic: (key id → keyed hash of the Kafka key under each of ``keys``, Kafka
    partition, offset)."""
    member = pass_member(endpoints, topic, plan, access=access, keys=keys, say=say)
    outcome = pass_outcome(spark, endpoints, [member], access=access, keys=keys).collect()
    return accounted(outcome, endpoints, topic, summary, say)


def pass_member(
    endpoints: Endpoints,
    topic: Topic,
    plan: Plan,
    *,
    access: KafkaAccess,
    keys: Keyring | None,
    say: Callable[[str], None],
) -> PassMember:
    """The plan with its topic's schema versions (and a ``key_format`` topic's key versions), read from the registry
    (``SubjectMissing``, ``RegistryError``); a version the catalog lacks whose records are held is said."""
    versions = version_schemas(topic, access.registry(), key_at_hand=keys is not None)
    for held in (v for v in versions if v.held is not None):
        say(
            f"{topic.kafka_topic}: schema_version={held.version} is not in the catalog and its records are held in "
            f"s3://{endpoints.bucket}/{topic.prefix.quarantine_prefix(restricted=True)} ({UNDECLARED_VERSION}): "
            f"{held.held}. Tag its personal fields in the registry, or add it to the catalog as "
            f"{topic.name}.v<N>.avsc; later records then archive"
        )
    return PassMember(topic, plan, tuple(versions), tuple(key_versions(topic, access.registry())))


def pass_outcome(
    spark: SparkSession,
    endpoints: Endpoints,
    members: Sequence[PassMember],
    *,
    access: KafkaAccess,
    keys: Keyring | None,
    light: bool = False,
) -> DataFrame:
    """The pass's Spark work, not yet run: its plans' records read, decoded and protected (``pass_records``), then
    written by the executors (``PlanWriter``, each plan with its own layout), one outcome row (``OUTCOME_SCHEMA``)
    per object, count and timing, each tagged with its plan's place in ``members``.

    A plan alone is read by Spark's Kafka source, one task per Kafka partition. A ``light`` pass (one plan or many) is
    read with one consumer per task, a task per 50,000 records and one per core at most (``task_reader``), not one per
    Kafka partition of every plan: a task's own cost (its consumer, its Python worker's set-up, its deserialized
    writer, its S3 client) is paid per core rather than per Kafka partition."""
    records = pass_records(spark, access, members, key=keys.current if keys else None, light=light)
    columns = pass_columns(members)
    layouts = [
        plan_layout(endpoints, m.topic, m.versions, mine, keys) for m, mine in zip(members, columns, strict=True)
    ]
    return records.mapInArrow(PlanWriter(layouts), OUTCOME_SCHEMA)


def accounted(
    outcome: list[Row], endpoints: Endpoints, topic: Topic, summary: Summary, say: Callable[[str], None]
) -> list[Tombstone]:
    """The plan's outcome rows accounted into ``summary`` (``account``); raise when a record is unaccounted for.
    Returns the tombstones of a ``by_key`` topic (as ``carry_out``)."""
    digests: dict[tuple[int, int], dict[str, str]] = {}
    for r in (r for r in outcome if r["kind"] == ERASE):
        digests.setdefault((r["kafka_partition"], r["first_offset"]), {})[r["key_id"]] = r["key"]
    tombstones = [(found, partition, offset) for (partition, offset), found in sorted(digests.items())]
    per_version = account([r for r in outcome if r["kind"] != ERASE], topic, summary)
    for version, (rows, objects) in sorted(per_version.items()):
        say(
            f"{topic.kafka_topic}: schema_version={version}: {rows} rows in {objects} objects under "
            f"s3://{endpoints.bucket}/{topic.prefix.data_prefix()}schema_version={version}/"
        )
    if not summary.balanced():
        raise RuntimeError(
            f"{topic.kafka_topic}: read {summary.read} != written {summary.written} + quarantined "
            f"{summary.quarantined} + tombstones {summary.tombstones}; nothing committed, the plan stays for a redo"
        )
    return tombstones


def plan_layout(
    endpoints: Endpoints,
    topic: Topic,
    versions: Sequence[transform.VersionSchema],
    columns: Mapping[int, str],
    keys: Keyring | None = None,
) -> PlanLayout:
    """Where and how the writer writes the topic's plan: its prefix, versions and their value columns in its pass
    (``columns``), extra columns (the Kafka key and headers the archive keeps, ``_pseudonym_key_id`` when a version
    it archives hashes a field or the archive hashes the key or headers) and file bounds, and for a ``by_key`` topic
    the keys its tombstones' clear Kafka keys are hashed under (each key a row's ``_key`` may have been hashed with,
    ``archive.key: hmac``, or any for a clear one)."""
    archive, kafka = topic.spec.archive, topic.kafka_columns
    hashes = StoredAs.HMAC in kafka.values() or any(needs_key(dict(v.personal)) for v in versions if v.held is None)
    return PlanLayout(
        endpoints,
        topic.prefix,
        tuple((v.version, columns[v.version]) for v in versions),
        (*kafka, *((KEY_ID_COLUMN,) if hashes else ())),
        keep_tombstones=topic.keeps_tombstones,
        max_records_per_file=archive.max_records_per_file,
        compression=archive.compression,
        quarantine=topic.quarantine,
        erasure_keys=keys if topic.spec.erasure == "by_key" else None,
        version_column=topic.spec.table_format == TableFormat.ICEBERG,
        changes_only=topic.spec.mode == TableMode.UPSERT,
    )
