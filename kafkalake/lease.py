"""Fencing for overlapping runs: one S3 object per fenced resource (a topic's archiving, a table's compaction) that
says which run holds it, and every durable step of the holder is a conditional write of that object.

Why S3 conditional writes (and not a DynamoDB lease or Kafka's group generation): the state the steps must agree
with already lives in this bucket (the archiver's plan, the compactor's manifests), S3 answers ``PutObject`` with
``If-None-Match: *`` / ``If-Match: <ETag>`` atomically (the local endpoint honours both), so the lease and the
work it protects are one object and one request: storing a plan *is* renewing the lease, and a run that lost the
lease cannot store, finish or release anything — its conditional write fails. A DynamoDB table would add a second
store to keep consistent with S3 and a stack resource per environment; Kafka's group generation fences offset
commits only for subscribed members, while the archiver assigns partitions itself.

The document: ``run_id`` (the holder, ``None`` once released), ``since`` (when it took the lease), ``renewed_at``
(its last durable step), ``token`` (the fencing token, one more at every acquisition) and ``work`` (what the holder
committed to do, e.g. the archiver's plan; kept across a takeover so that the next holder redoes exactly it).

A run may take the lease when there is none, when it is released, or when its holder stopped renewing it for
longer than ``ttl`` (then it redoes the stored work); otherwise ``acquire`` raises ``Held`` and the run skips the
resource. Every durable step renews the lease, and ``kept_alive`` renews it in the background in between (every
third of ``ttl``), so a long step never loses it while its process lives; a holder that dies (SIGKILL, lost
worker) leaves a lease that turns stale ``ttl`` after its last renewal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

_CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404")
"""What S3 answers a conditional write that lost the race: the object changed, is being changed, or is gone."""


class Held(RuntimeError):
    """Another run holds the lease and is still renewing it."""

    def __init__(self, key: str, run_id: str, since: str) -> None:
        super().__init__(f"held by run {run_id} since {since}")
        self.key, self.run_id, self.since = key, run_id, since


class LeaseLost(RuntimeError):
    """The run no longer holds the lease: another run took it over, so nothing more of this run is committed."""


@dataclass(frozen=True)
class LeaseDocument:
    run_id: str | None
    since: str
    renewed_at: str
    token: int
    work: dict[str, Any] | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> LeaseDocument:
        """A stored document; a bare work document (written before leases existed) reads as released work."""
        if "token" not in raw:
            return cls(run_id=None, since="", renewed_at="", token=0, work=raw)
        return cls(raw["run_id"], raw["since"], raw["renewed_at"], int(raw["token"]), raw.get("work"))

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    def stale(self, now: datetime, ttl: timedelta) -> bool:
        return self.run_id is None or datetime.fromisoformat(self.renewed_at) + ttl <= now


class Lease:
    """A held lease: ``update`` and ``release`` succeed only while this run still holds it."""

    def __init__(
        self, s3: Any, bucket: str, key: str, *, document: LeaseDocument, etag: str, now: Callable[[], datetime]
    ) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.document, self.etag, self.now = document, etag, now
        self.requests = 0
        """Conditional writes this holder made after acquiring (one per durable step or renewal)."""
        self._lock = threading.Lock()

    @classmethod
    def acquire(
        cls, s3: Any, bucket: str, key: str, run_id: str, *, ttl: timedelta, now: Callable[[], datetime]
    ) -> Lease:
        """Take the lease for ``run_id`` (keeping any stored work for a redo), or raise ``Held``."""
        for _ in range(5):
            found = _read(s3, bucket, key)
            at = now().isoformat()
            if found is None:
                document, condition = LeaseDocument(run_id, at, at, 1), {"IfNoneMatch": "*"}
            else:
                stored, etag = found
                if not stored.stale(now(), ttl) and stored.run_id != run_id:
                    raise Held(key, str(stored.run_id), stored.since)
                document = LeaseDocument(run_id, at, at, stored.token + 1, stored.work)
                condition = {"IfMatch": etag}
            try:
                put = s3.put_object(Bucket=bucket, Key=key, Body=document.to_json(), **condition)
            except ClientError as exc:
                if lost_race(exc):
                    continue
                raise
            return cls(s3, bucket, key, document=document, etag=put["ETag"], now=now)
        raise RuntimeError(f"s3://{bucket}/{key}: the lease changed five times while taking it; try again")

    @property
    def work(self) -> dict[str, Any] | None:
        return self.document.work

    def update(self, work: dict[str, Any] | None) -> None:
        """Store ``work`` and renew the lease, if this run still holds it (else ``LeaseLost``)."""
        self._write(replace(self.document, work=work, renewed_at=self.now().isoformat()))

    def renew(self) -> None:
        """Tell other runs this holder is alive (``LeaseLost`` if it no longer holds the lease)."""
        self._write(replace(self.document, renewed_at=self.now().isoformat()))

    def kept_alive(self, every: timedelta) -> AbstractContextManager[None]:
        """Renew the lease every ``every`` until the block ends (``kept_alive`` of one)."""
        return kept_alive([self], every)

    def release(self) -> None:
        """Let the next run take the lease at once (the stored work stays for it)."""
        self._write(replace(self.document, run_id=None, renewed_at=self.now().isoformat()))

    def _write(self, document: LeaseDocument) -> None:
        with self._lock:
            self._write_held(document)

    def _write_held(self, document: LeaseDocument) -> None:
        try:
            put = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=document.to_json(), IfMatch=self.etag)
        except ClientError as exc:
            if not lost_race(exc):
                raise
            holder = _read(self.s3, self.bucket, self.key)
            who = f"run {holder[0].run_id} (token {holder[0].token})" if holder else "a run that deleted it"
            raise LeaseLost(
                f"run {self.document.run_id} lost s3://{self.bucket}/{self.key} (token {self.document.token}) to "
                f"{who}; nothing more of this run is committed for it — the holder redoes the stored work"
            ) from exc
        self.requests += 1
        self.document, self.etag = document, put["ETag"]


@contextmanager
def kept_alive(leases: Sequence[Lease], every: timedelta) -> Iterator[None]:
    """Renew every lease in ``leases`` each ``every`` from one background thread until the block ends. A renewal
    that fails is left for the holder's next durable step to report (it fails the same way)."""
    stop = threading.Event()
    live = list(leases)

    def beat() -> None:
        while live and not stop.wait(every.total_seconds()):
            for lease in list(live):
                try:
                    lease.renew()
                except LeaseLost:
                    live.remove(lease)
                except ClientError:  # a transient S3 error: the next beat or step tries again
                    continue

    beating = threading.Thread(target=beat, name="lease renewals", daemon=True)
    beating.start()
    try:
        yield
    finally:
        stop.set()
        beating.join()


def _read(s3: Any, bucket: str, key: str) -> tuple[LeaseDocument, str] | None:
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise
    return LeaseDocument.parse(json.loads(got["Body"].read())), got["ETag"]


def lost_race(exc: ClientError) -> bool:
    """Whether S3 refused a conditional write because another writer got there first (``_CONFLICT``)."""
    return str(exc.response["Error"]["Code"]) in _CONFLICT
