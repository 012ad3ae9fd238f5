"""The erasure job: every pending request of an environment, in one batch, through the compactor's rewrite.

A run takes the environment's erasure lease (one run at a time; a stale one is taken over with its batch). With no
batch in it, it brings every erasable table's subject index up to date (``spark_jobs.erasure.index``: only objects
written since the last run are read), makes a batch of every pending request (``spark_jobs.erasure.matching``,
which reads only the partitions the index names for the requests' subjects) and stores it there before any
rewrite. Then, table by table under the table's compaction lease (so it never races the compactor): each partition
with rows to erase gets a manifest whose ``erase`` names them (``spark_jobs.compaction.selection.plan_partition``)
and is carried forward by ``spark_jobs.compaction.protocol.carry_forward`` (written without them, verified to hold
exactly the inputs minus them by (Kafka partition, offset), swapped); after the grace period the replaced objects
and every noncurrent version go (``spark_jobs.erasure.purge``); quarantine objects are rewritten. An Iceberg table
(``table_format: iceberg``) has no index and no partition rewrite: its rows are deleted in one commit, and after the
grace period its old snapshots, orphans and noncurrent versions go (``spark_jobs.erasure.table_delete``). When
every table is done, the indexes forget the partitions it rewrote (their entries dropped and read again from what is
left: no entry of an erased subject outlives its rows), then each request gets its receipt and the batch is cleared;
an index that cannot forget holds the receipts back to the next run. A table that fails or is held is retried by the
next run; the others go on. Last, every run replaces each finished request (``kafkalake.erasure.finished``: its
receipt written, a tombstone request's watch over) by what remains of it, its receipt tokens, and deletes every
earlier version of the requests (``spark_jobs.erasure.purge.purge_noncurrent``): no digest outlives its request.

Past 400 lines: the run's steps (batch, rewrite, purge, forget, receipts, remains) share its leases, clients and
batch; apart, each would take all of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, Unpack

from botocore.exceptions import BotoCoreError, ClientError
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import (
    ErasureReceipt,
    ErasureRequest,
    RequestStore,
    Source,
    TableErasure,
    finished,
    pending,
    watched,
)
from kafkalake.glue import table_partitions
from kafkalake.iceberg import CHANGES_LEAD
from kafkalake.jobspec import COMPACTOR_GRACE_MINUTES
from kafkalake.layout import Partition, erasure_lease_key, erasure_requests_prefix
from kafkalake.lease import Held, Lease, LeaseLost, kept_alive, quiet_spell
from kafkalake.metrics import ENVIRONMENT_DIMENSION, NAMESPACE, ErasureMetric
from kafkalake.personal import Keyring, KeyUnavailable, load_keys
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import TableFormat, TableMode
from spark_jobs.common import Run, add_lease_argument, job_session
from spark_jobs.compaction.clean import clean
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.protocol import carry_forward
from spark_jobs.compaction.selection import plan_partition
from spark_jobs.compaction.work import Knobs, Rewriter, RewriterOptions, Work, describe, table_name
from spark_jobs.erasure import index, matching, table_delete
from spark_jobs.erasure.batch import Batch, PartitionErasure, TableBatch, TableDelete
from spark_jobs.erasure.purge import purge_noncurrent, purge_partition, purge_quarantine
from spark_jobs.iceberg_maintenance import current_snapshot, unreceipted_plans


@dataclass
class Outcome:
    receipts: list[str] = field(default_factory=list)
    """Requests finished by this run."""
    failed: dict[str, str] = field(default_factory=dict)
    """Table → why it failed (reasons name files and steps, never a subject)."""
    waiting: list[str] = field(default_factory=list)
    """Tables held by another run, or waiting for a grace period or a Glue partition."""
    pending: int = 0
    late: int = 0
    """Requests without a receipt after the run, and those of them past their deadline."""
    indexed: dict[str, int] = field(default_factory=dict)
    """Table → data objects this run read into its subject index."""


class _Unmatched(Exception):
    """A table's scan for a batch found rows it cannot match (``KeyUnavailable``); the requests reaching it."""

    def __init__(self, table: str, requests: set[str], cause: KeyUnavailable) -> None:
        super().__init__(table)
        self.table, self.requests, self.cause = table, requests, cause


class Eraser(Rewriter):
    """The rewriter whose work is the partitions of the environment's pending erasure requests."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        env: str,
        topics: Sequence[Topic],
        knobs: Knobs,
        **options: Unpack[RewriterOptions],
    ) -> None:
        """The ``Rewriter`` of ``env``'s erasable ``topics``."""
        super().__init__(spark, endpoints, [t for t in topics if t.erasable], knobs, **options)
        self.env = env
        self.store = RequestStore(self.s3, self.bucket, env)

    def run(self) -> Outcome:
        outcome = Outcome()
        try:
            lease = Lease.acquire(
                self.s3,
                self.bucket,
                erasure_lease_key(self.env),
                self.identity.run_id,
                ttl=self.identity.lease_ttl,
                now=self.now,
            )
        except Held as busy:
            self.say(f"erasure in {self.env}: skipped: {busy}")
            return outcome
        try:
            with kept_alive([lease], quiet_spell(self.identity.lease_ttl)):
                self._carry_out(lease, outcome)
                requests, receipts = self.store.requests()[0], self.store.receipts()  # this run's receipts included
                self._end_finished(requests, receipts)
        finally:
            try:
                lease.release()
            except LeaseLost as lost:
                self.say(str(lost))
        self._publish(outcome, requests, receipts)
        return outcome

    def _publish(self, outcome: Outcome, requests: list[ErasureRequest], receipts: dict[str, Any]) -> None:
        """Pending and late requests as metrics (the late-requests alarm); a failure to publish is only said."""
        waiting = pending(requests, receipts)
        outcome.pending, outcome.late = len(waiting), sum(self.now() > r.deadline for r in waiting)
        dimensions = [{"Name": ENVIRONMENT_DIMENSION, "Value": self.env}]
        data = [
            {"MetricName": name, "Dimensions": dimensions, "Value": value, "Unit": "Count"}
            for name, value in (
                (ErasureMetric.REQUESTS_LATE, outcome.late),
                (ErasureMetric.REQUESTS_PENDING, outcome.pending),
            )
        ]
        try:
            make_client(self.endpoints, "cloudwatch").put_metric_data(Namespace=NAMESPACE, MetricData=data)
        except (ClientError, BotoCoreError) as exc:
            self.say(f"erasure metrics not published: {describe(exc)}")

    def _carry_out(self, lease: Lease, outcome: Outcome) -> None:
        requests, problems = self.store.requests()
        for problem in problems:
            self.say(f"not carried out: {problem}")
        batch = Batch.from_work(lease.work) if lease.work else None
        if batch is None:
            indexes = self._refresh(outcome)
            receipts = self.store.receipts()
            todo, late = pending(requests, receipts), watched(requests, receipts, self.now())
            batch = self._new_batch(todo, late, receipts, indexes, outcome)
            if batch is None:
                self.say(f"erasure in {self.env}: no pending request, no late row of a done one")
                return
            lease.update(batch.to_work())
            self.say(f"erasure batch {batch.batch_id}: {len(batch.requests)} requests over {len(batch.tables)} tables")
        for topic in self.topics:
            name = table_name(topic)
            if name not in batch.tables or batch.tables[name].done:
                continue
            try:
                self._table(topic, batch.tables[name], outcome, save=lambda: lease.update(batch.to_work()))
            except Held as busy:
                outcome.waiting.append(name)
                self.say(f"{name}: held by another run ({busy}); the next erasure run carries it on")
            except Exception as exc:  # noqa: BLE001 - one table's failure never stops the others: reported
                outcome.failed[name] = describe(exc)
                self.say(f"FAILED {name}: {describe(exc)}")
            finally:
                lease.update(batch.to_work())
        if batch.done:
            forget = {name: set(table.partitions) for name, table in batch.tables.items() if table.partitions}
            indexes = self._refresh(outcome, forget)
            if any(name not in indexes for name in forget):
                self.say(f"erasure batch {batch.batch_id}: done; its receipts wait for the indexes to forget its rows")
                return
            chosen = [r for r in requests if r.request_id in batch.requests]
            for request in chosen:
                receipt = self._receipt(batch, request)
                if request.request_id in batch.earlier:
                    receipt.amend(batch.earlier[request.request_id])
                self.store.put_receipt(receipt)
                outcome.receipts.append(request.request_id)
            lease.update(None)
            self.say(f"erasure batch {batch.batch_id}: done, {len(chosen)} receipts")

    def _end_finished(self, requests: list[ErasureRequest], receipts: dict[str, Any]) -> None:
        """Each finished request replaced by what remains of it (``ErasureRequest.remains``), after its receipt, and
        every noncurrent version under the requests' prefix deleted: the digests of done requests go with them."""
        ended = finished(requests, receipts, self.now())
        for request in ended:
            self.store.put(request.remains())
        _, deleted = purge_noncurrent(self.s3, self.bucket, erasure_requests_prefix(self.env))
        if ended or deleted:
            self.say(
                f"erasure in {self.env}: {len(ended)} finished requests kept as their receipt tokens only, "
                f"{deleted} earlier versions of requests deleted"
            )

    def _refresh(self, outcome: Outcome, forget: dict[str, set[str]] | None = None) -> dict[str, index.Index]:
        """Every erasable table's subject index, up to date, without entries of the partitions ``forget`` names
        (table → partition paths a done batch rewrote); a table whose index fails is scanned whole (reported)."""
        found = {}
        for topic in self.topics:
            name = table_name(topic)
            if topic.spec.table_format == TableFormat.ICEBERG:
                continue  # no index: its scan reads the current snapshot's files, only the columns it matches on
            try:
                current = index.refresh(
                    self.spark,
                    self.s3,
                    self.bucket,
                    topic,
                    self.keys,
                    forget=(forget or {}).get(name, set()),
                    now=self.now,
                    say=self.say,
                )
            except Exception as exc:  # noqa: BLE001 - one table's index never stops the others: reported
                outcome.failed[f"{name} (subject index)"] = describe(exc)
                self.say(f"FAILED {name} subject index: {describe(exc)}; its batches scan the table whole")
                continue
            if current is not None:
                found[name] = current
                outcome.indexed[name] = outcome.indexed.get(name, 0) + current.refreshed.scanned
        return found

    def _new_batch(
        self,
        todo: list[ErasureRequest],
        late: list[tuple[ErasureRequest, datetime]],
        receipts: dict[str, Any],
        indexes: dict[str, index.Index],
        outcome: Outcome,
    ) -> Batch | None:
        """The batch (``_batch``). A table where some request's rows cannot all be matched (``KeyUnavailable``, the
        key id named) fails, and every request reaching it is left out, pending, so none gets a receipt that misses
        rows; the batch is made again without them."""
        while True:
            try:
                return self._batch(todo, late, receipts, indexes)
            except _Unmatched as unmatched:
                outcome.failed[unmatched.table] = describe(unmatched.cause)
                self.say(f"FAILED {unmatched.table}: {describe(unmatched.cause)}")
                todo = [r for r in todo if r.request_id not in unmatched.requests]
                late = [(r, since) for r, since in late if r.request_id not in unmatched.requests]

    def _batch(
        self,
        todo: list[ErasureRequest],
        late: list[tuple[ErasureRequest, datetime]],
        receipts: dict[str, Any],
        indexes: dict[str, index.Index],
    ) -> Batch | None:
        """The pending requests' rows, and the rows of done tombstone requests in objects written since their batch
        started (late); in the partitions each table's index names for them (and objects it does not cover), or the
        whole table without one. None when there is neither."""
        if not todo and not late:
            return None
        started = self.now()
        batch = Batch(f"{started.strftime('%Y%m%dT%H%M%SZ')}", started.isoformat(), [r.request_id for r in todo])
        for topic in self.topics:
            try:
                kept = indexes.get(table_name(topic))
                found = self._table_batch(topic, todo=todo, late=late, receipts=receipts, kept=kept, batch=batch)
            except KeyUnavailable as exc:
                reached = {r.request_id for r in [*todo, *(r for r, _ in late)] if matching.in_scope(topic, r)}
                raise _Unmatched(table_name(topic), reached, exc) from None
            if found is not None:
                batch.tables[table_name(topic)] = found
        batch.requests += sorted(batch.earlier)
        return batch if batch.requests else None

    def _table_batch(
        self,
        topic: Topic,
        *,
        todo: list[ErasureRequest],
        late: list[tuple[ErasureRequest, datetime]],
        receipts: dict[str, Any],
        kept: index.Index | None,
        batch: Batch,
    ) -> TableBatch | None:
        """One table's part of the batch (None when no request reaches it); done requests reopened for late rows
        go into ``batch.earlier``."""
        keys, found = self.keys, None
        if any(matching.in_scope(topic, r) for r in todo):
            wanted = matching.scope(topic, todo)
            hits = self._hits(kept, wanted)
            found = matching.find(self.spark, self.s3, self.bucket, topic, keys=keys, wanted=wanted, hits=hits)
        mine = [(r, since) for r, since in late if matching.in_scope(topic, r)]
        if mine:
            wanted, since = matching.scope(topic, [r for r, _ in mine]), min(s for _, s in mine)
            hits = self._hits(kept, wanted)
            extra = matching.find(
                self.spark, self.s3, self.bucket, topic, keys=keys, wanted=wanted, since=since, hits=hits
            )
            if extra.requests():
                found = found or TableBatch()
                found.add(extra)
                batch.earlier |= {r: receipts[r] for r in extra.requests()}
        return found

    def _hits(self, kept: index.Index | None, wanted: matching.Scope) -> index.Hits | None:
        """Where the table's index says ``wanted``'s rows can be; None (every object) without an index."""
        if kept is None or not wanted:
            return None
        return kept.hits(self.spark, wanted.digests(), wanted.common_key_ids())

    @cached_property
    def keys(self) -> Keyring:
        """The pseudonym keys (the current one and the one a rotation replaced), read once per run."""
        return load_keys(make_client(self.endpoints, "secretsmanager"), self.endpoints.pseudonym_secret_arn)

    def _table(self, topic: Topic, table: TableBatch, outcome: Outcome, save: Callable[[], None]) -> None:
        """Rewrite, then purge, the table's partitions (an Iceberg table: delete its rows, then clean), under the
        table's compaction lease; its quarantine. ``save`` stores the batch's progress."""
        name = table_name(topic)
        lease = Lease.acquire(
            self.s3,
            self.bucket,
            topic.prefix.compaction_lease_key(),
            self.identity.run_id,
            ttl=self.identity.lease_ttl,
            now=self.now,
        )
        self.leases[name] = lease
        try:
            with kept_alive([lease], quiet_spell(self.identity.lease_ttl)):
                if table.iceberg is not None:
                    self._delete(topic, table.iceberg, save)
                self._rewrite(topic, table)
                self._purge(topic, table)
                for key, quarantined in table.quarantine.items():
                    if not quarantined.done:
                        quarantined.versions_deleted += purge_quarantine(
                            self.s3,
                            self.bucket,
                            key,
                            quarantined.keys,
                            self.endpoints.restricted_key_arn,
                            drop_raw=quarantined.drop_raw,
                        )
                        quarantined.done = True
        finally:
            self.leases.pop(name, None)
            lease.release()
        if not table.done:
            outcome.waiting.append(name)

    def _delete(self, topic: Topic, entry: TableDelete, save: Callable[[], None]) -> None:
        """An Iceberg table's rows deleted in one commit, then, once the grace period after it has passed and no
        plan of the archiver's waits for its redo, every trace of them (``spark_jobs.erasure.table_delete``); the
        snapshot before the delete is saved before it, the delete after it."""
        name = table_name(topic)
        lease = self.leases[name]
        if entry.deleted_at is None:
            if entry.base_snapshot is None:
                entry.base_snapshot = current_snapshot(self.spark, name)
                save()
            lease.renew()
            if entry.keys:  # none: an upsert table whose changes took the rows (``matching._snapshot_rows``)
                entry.removed = table_delete.delete(self.spark, name, entry.keys, entry.base_snapshot, self.say)
            entry.deleted_at = self.now().isoformat()
            save()
            self.say(f"{name}: {len(entry.keys)} rows deleted in one commit, {len(entry.removed)} data files replaced")
        if datetime.fromisoformat(entry.deleted_at) + self.knobs.grace_period > self.now():
            return
        pending = unreceipted_plans(self.spark, self.s3, self.bucket, name, topic.prefix)
        if pending:
            self.say(f"{name}: snapshots not expired while archiver plans {', '.join(pending)} lack their receipts")
            return
        lease.renew()
        created = self.glue.get_table(DatabaseName=topic.database, Name=topic.table)["Table"]["CreateTime"]
        state = topic.spec.mode == TableMode.UPSERT
        entry.versions_deleted += table_delete.clean(
            self.spark,
            self.s3,
            self.bucket,
            name,
            removed=entry.removed,
            table_created=created - CHANGES_LEAD if state else created,
            now=self.now(),
            changes_until=datetime.fromisoformat(entry.deleted_at) if state else None,
            say=self.say,
        )
        entry.purged = True

    def _rewrite(self, topic: Topic, table: TableBatch) -> None:
        todo = {path: p for path, p in table.partitions.items() if p.swapped_at is None}
        if not todo:
            return
        glue = {"/".join(p["Values"]): p for p in table_partitions(self.glue, topic.database, topic.table) or []}
        work: list[tuple[PartitionErasure, Work]] = []
        for entry in todo.values():
            glue_partition = glue.get("/".join(entry.values))
            if glue_partition is None:
                self.say(f"{table_name(topic)} {'/'.join(entry.values)}: not in Glue yet; erased once it is")
                continue
            planned = plan_partition(self, topic, glue_partition, sys.maxsize, late=False, erase=entry.keys)
            if isinstance(planned, Work):
                work.append((entry, planned))
        carry_forward(self, [w for _, w in work])
        failures = [f"{item.name}: {item.failure}" for _, item in work if item.failure]
        for entry, item in work:
            manifest = item.manifest
            if manifest.state == ManifestState.SWAPPED and sorted(manifest.erase) == sorted(entry.keys):
                entry.run_id, entry.inputs = manifest.run_id, sorted(manifest.due_for_deletion())
                entry.swapped_at = manifest.swapped_at
                self.say(f"{item.name}: rewritten without {manifest.erased} rows ({manifest.rows} rows kept)")
        if failures:
            raise RuntimeError("; ".join(failures))

    def _purge(self, topic: Topic, table: TableBatch) -> None:
        for entry in table.partitions.values():
            if entry.swapped_at is None or entry.purged:
                continue
            if datetime.fromisoformat(entry.swapped_at) + self.knobs.grace_period > self.now():
                continue
            partition = Partition.from_values(entry.values)
            key = topic.prefix.compaction_manifest_key(partition)
            manifest = self.manifests.load(key)
            if manifest is not None and manifest.run_id == entry.run_id and manifest.state == ManifestState.SWAPPED:
                clean(self, manifest, key)
            objects, deleted = purge_partition(self.s3, self.bucket, topic, partition, set(entry.inputs))
            entry.objects_deleted = sorted(set(entry.objects_deleted) | set(entry.inputs))
            entry.versions_deleted += deleted
            entry.purged = True
            self.say(
                f"{table_name(topic)} {'/'.join(entry.values)}: {deleted} object versions deleted ({objects} current)"
            )

    def _receipt(self, batch: Batch, request: ErasureRequest) -> ErasureReceipt:
        receipt = ErasureReceipt(
            request.request_id,
            request.tokens(),
            batch.started_at,
            self.now().isoformat(),
        )
        for topic in self.topics:
            name = table_name(topic)
            if name not in batch.tables or not matching.in_scope(topic, request):
                continue
            table = batch.tables[name]
            mine = [p for p in table.partitions.values() if p.rows_by_request.get(request.request_id)]
            by_field = request.source != Source.TOMBSTONES  # a tombstone names a key, which the quarantine keeps
            quarantined = [
                q
                for q in table.quarantine.values()
                if q.rows_by_request.get(request.request_id) or (q.drop_raw and by_field)
            ]
            deleted = table.iceberg.rows_by_request.get(request.request_id, 0) if table.iceberg else 0
            receipt.tables[name] = TableErasure(
                [p.values for p in mine],
                sum(p.rows_by_request[request.request_id] for p in mine) + deleted,
                sum(q.rows_by_request.get(request.request_id, 0) for q in quarantined),
                sum(q.drop_raw and by_field for q in quarantined),
            )
            receipt.objects_deleted += [k for p in mine for k in p.objects_deleted]
            receipt.versions_deleted += sum(p.versions_deleted for p in mine)
            receipt.versions_deleted += sum(q.versions_deleted for q in quarantined)
            if table.iceberg and deleted:
                receipt.objects_deleted += [parse_s3_uri(uri).key for uri in table.iceberg.removed]
                receipt.versions_deleted += table.iceberg.versions_deleted
        return receipt


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="erasure", description="Carry out the pending erasure requests.")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    parser.add_argument("--grace-minutes", type=int, default=COMPACTOR_GRACE_MINUTES)
    add_lease_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py erase --env staging --catalog catalog`` (EMR Serverless); exits 1 when any table failed,
    after all the others were done."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    topics = load_topic_catalog(args.catalog).for_env(args.env)
    spark = job_session("kafkalake-erasure")
    run = Run.new(spark, timedelta(seconds=args.lease_ttl_seconds))
    knobs = Knobs(grace_period=timedelta(minutes=args.grace_minutes))
    outcome = Eraser(spark, endpoints, args.env, topics, knobs, run=run).run()
    print(
        f"erasure: {len(outcome.receipts)} requests done, {outcome.pending} pending ({outcome.late} late), "
        f"objects indexed: {sum(outcome.indexed.values())}, tables waiting: {outcome.waiting}, failed: {outcome.failed}"
    )
    if outcome.failed:
        sys.exit(1)
