"""Fencing for overlapping runs: one S3 object per fenced resource (a topic's archiving, a table's compaction) that
says which run holds it, and every durable step of the holder is a conditional write of that object.

Why S3 conditional writes (and not a DynamoDB lease or Kafka's group generation): the state the steps must agree
with already lives in this bucket (the archiver's plan, the compactor's manifests), S3 answers ``PutObject`` with
``If-None-Match: *`` / ``If-Match: <ETag>`` atomically (the local endpoint honours both), so the lease and the
work it protects are one object and one request: storing a plan *is* renewing the lease, and a run that lost the
lease cannot store, finish or release anything — its conditional write fails. A DynamoDB table would add a second
store to keep consistent with S3 and a stack resource per environment; Kafka's group generation fences offset
commits only for subscribed members, while the archiver assigns partitions itself.

Past 400 lines on purpose: taking, renewing, updating and releasing share one conditional-write path and its
recovery from lost answers, which must not exist twice.

The document: ``run_id`` (the holder, ``None`` once released), ``since`` (when it took the lease) and
``renewed_at`` (its last durable step), both by the holder's clock and only for people to read; ``token`` (the
fencing token, one more at every acquisition); ``work`` (what the holder committed to do, e.g. the archiver's plan;
kept across a takeover so that the next holder redoes exactly it); ``writer`` (a random id of this acquisition) and
``write`` (the holder's count of its writes), so that every write has a body, hence an ETag, of its own and the
holder can recognise its own writes.

A run may take the lease when there is none, when it is released, or when its holder stopped renewing it for longer than
``ttl``; otherwise ``acquire`` raises ``Held`` and the run skips the resource. Every durable step renews the lease, and
``kept_alive`` renews it in the background in between (once half of ``ttl`` has passed since its last write:
``quiet_spell``), so a long step never loses it while its process lives; a holder that dies (SIGKILL, lost worker)
leaves a lease that turns stale ``ttl`` after its last renewal. A holder's last durable step may release the lease in
the same write (``update(..., release=True)``), so a resource with one step left costs no write of its own to release.

Requests, each billed as an S3 PUT: one to take the lease, one per durable step, and one per renewal. A renewal is
needed only where no durable step wrote for half of ``ttl``, so ``kept_alive`` checks every sixth of ``ttl`` and
renews only the leases that went that long without a write: between one half and two thirds of ``ttl`` after the
last write, which leaves three checks (a renewal tried again at each) before the holder's expiry.

Time: staleness is judged on S3's clock alone, never by comparing two machines' clocks. A taker reads the lease's
``Last-Modified`` (when S3 stored the holder's last write) and the ``Date`` of the same GET's response (S3's now);
both are truncated to whole seconds, so the lease is stale once they are at least ``ttl`` + 1 s apart
(``RESOLUTION``): never earlier than ``ttl`` after S3 stored the last renewal, at most ``ttl`` + 2 s after it
(``STALE_WITHIN``; were S3 to round ``Last-Modified`` instead, half a second more). The
holder, for its part, counts ``ttl`` on its own monotonic clock from the moment it *sent* its last write that
landed (which is before S3 stored it): past that, it takes itself for lost (``LeaseLost`` at its next step, no more
renewals) even if no run took over yet, so its steps stop before any taker may start. The bound assumes only that
S3's own hosts agree on the time (AWS keeps them on its Time Sync service) and that a process does not sleep
between checking its lease and making the step (a suspended VM is fenced at its next conditional write only).

What S3 answers a conditional write (https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html), and what
the lease does with it: ``412`` (the ETag changed, or the object exists) and ``404`` mean another writer got there
first — unless the object now holds this holder's own write: botocore retries a write whose answer was lost (a
reset, a timeout, a 5xx after S3 stored it), and the retry is refused because the first attempt landed. So after a
412 the holder reads the object back and takes a write of its own ``writer`` for its own (when taking the lease and
at every later write alike).
``409 ConditionalRequestConflict`` (a concurrent write in progress) is retried after re-reading the ETag, with
backoff, ``ATTEMPTS`` times. A network error or 5xx left over after botocore's retries fails the step (as any S3
error does), but the renewal thread only tries again at its next beat: it stops when the lease is really lost (the
object holds another writer's write) or when it could not renew before the holder's own expiry.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import ClientError

_CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409", "404")
"""What S3 answers a conditional write that lost the race: the object changed, is being changed, or is gone."""
_IN_PROGRESS = ("ConditionalRequestConflict", "409")
"""What S3 answers a conditional write that met another write in progress: AWS says to re-read the ETag and retry."""
ATTEMPTS = 5
"""Conditional writes one acquisition or one step makes at most (each after re-reading the lease)."""
BACKOFF = timedelta(milliseconds=100)
"""The wait after a first ``409``, doubled after each next one."""
RESOLUTION = timedelta(seconds=1)
"""S3's ``Date`` and ``Last-Modified`` headers are whole seconds: the margin a taker adds to ``ttl``."""
STALE_WITHIN = 2 * RESOLUTION
"""A lease is stale, by S3's clock, at most this long after ``ttl`` has passed since S3 stored its last write."""


class Held(RuntimeError):
    """Another run holds the lease and is still renewing it."""

    def __init__(self, key: str, run_id: str, since: str) -> None:
        super().__init__(f"held by run {run_id} since {since}")
        self.key, self.run_id, self.since = key, run_id, since


class LeaseLost(RuntimeError):
    """The run no longer holds the lease: another run took it over, or may have (the holder could not renew it in
    time), so nothing more of this run is committed."""


@dataclass(frozen=True)
class LeaseDocument:
    run_id: str | None
    since: str
    renewed_at: str
    token: int
    work: dict[str, Any] | None = None
    writer: str = ""
    write: int = 0

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> LeaseDocument:
        """A stored document; a bare work document (written before leases existed) reads as released work, and one
        without a writer id (written before them) as no holder's that reads it now."""
        if "token" not in raw:
            return cls(run_id=None, since="", renewed_at="", token=0, work=raw)
        return cls(
            raw["run_id"],
            raw["since"],
            raw["renewed_at"],
            int(raw["token"]),
            raw.get("work"),
            str(raw.get("writer", "")),
            int(raw.get("write", 0)),
        )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


@dataclass(frozen=True)
class Stored:
    """The lease as read: its document and ETag, when S3 stored it (``Last-Modified``) and S3's time of the read
    (the response's ``Date``)."""

    document: LeaseDocument
    etag: str
    written: datetime
    read: datetime

    def stale(self, ttl: timedelta) -> bool:
        """Released, or not written for longer than ``ttl`` by S3's clock (see the module's docstring on time)."""
        return self.document.run_id is None or self.read - self.written >= ttl + RESOLUTION


class Lease:
    """A held lease: ``update`` and ``release`` succeed only while this run still holds it."""

    def __init__(
        self,
        s3: Any,
        bucket: str,
        key: str,
        *,
        stored: tuple[LeaseDocument, str],
        ttl: timedelta,
        sent: float,
        now: Callable[[], datetime],
        monotonic: Callable[[], float],
    ) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.document, self.etag = stored
        self.ttl, self.now, self.monotonic = ttl, now, monotonic
        self.expires = sent + ttl.total_seconds()
        """When, on ``monotonic``, the holder takes itself for lost: ``ttl`` after sending its last landed write."""
        self.requests = 0
        """S3 requests this holder made after acquiring (one per durable step or renewal, more on a conflict)."""
        self.released = False
        """Whether this holder released the lease (``release``, or a last step's ``update``): it writes no more."""
        self._writes = self.document.write
        self._lock = threading.RLock()

    @classmethod
    def acquire(
        cls,
        s3: Any,
        bucket: str,
        key: str,
        run_id: str,
        *,
        ttl: timedelta,
        now: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
        work: Callable[[dict[str, Any] | None], dict[str, Any] | None] = lambda stored: stored,
    ) -> Lease:
        """Take the lease for ``run_id``, or raise ``Held``. The write that takes it stores ``work(stored work)``
        (the stored work itself by default, kept for a redo): a holder's first durable step can ride on it, decided
        once the lease is known to be takeable and again should that write lose a race. ``now`` dates the document
        for people; ``monotonic`` times the holder's own expiry."""
        found = _read(s3, bucket, key)
        for attempt in range(ATTEMPTS):
            if found is None:
                token, condition, stored_work = 1, {"IfNoneMatch": "*"}, None
            else:
                stored = found.document
                if not found.stale(ttl) and stored.run_id != run_id:
                    raise Held(key, str(stored.run_id), stored.since)
                token, condition, stored_work = stored.token + 1, {"IfMatch": found.etag}, stored.work
            taking = work(stored_work)
            at, writer = now().isoformat(), uuid.uuid4().hex
            document = LeaseDocument(run_id, at, at, token, taking, writer)
            sent = monotonic()
            try:
                taken = document, s3.put_object(Bucket=bucket, Key=key, Body=document.to_json(), **condition)["ETag"]
            except ClientError as exc:
                if not lost_race(exc):
                    raise
                _back_off(exc, attempt)
                found = _read(s3, bucket, key)
                if found is None or found.document.writer != writer:
                    continue
                taken = found.document, found.etag  # ours landed; botocore's retry of it was refused
            return cls(s3, bucket, key, stored=taken, ttl=ttl, sent=sent, now=now, monotonic=monotonic)
        raise RuntimeError(f"s3://{bucket}/{key}: the lease changed {ATTEMPTS} times while taking it; try again")

    @property
    def work(self) -> dict[str, Any] | None:
        return self.document.work

    def update(self, work: dict[str, Any] | None, *, release: bool = False) -> None:
        """Store ``work`` and renew the lease, if this run still holds it (else ``LeaseLost``); with ``release``, the
        holder's last step: the same write releases the lease."""
        if release:
            self._write(work=work, run_id=None)
        else:
            self._write(work=work)

    def renew(self, quiet_for: timedelta = timedelta(0)) -> None:
        """Tell other runs this holder is alive (``LeaseLost`` if it no longer holds the lease), unless its last write
        was sent less than ``quiet_for`` ago (that write told them) or it was released."""
        with self._lock:
            if self.released or self.monotonic() - self.written < quiet_for.total_seconds():
                return
            self._write()

    @property
    def written(self) -> float:
        """When, on ``monotonic``, the holder sent its last write that landed."""
        return self.expires - self.ttl.total_seconds()

    def kept_alive(self, every: timedelta) -> AbstractContextManager[None]:
        """Renew the lease whenever ``every`` passed without a write, until the block ends (``kept_alive`` of one)."""
        return kept_alive([self], every)

    def release(self) -> None:
        """Let the next run take the lease at once (the stored work stays for it); nothing when already released."""
        with self._lock:
            if not self.released:
                self._write(run_id=None)

    def _write(self, **change: Any) -> None:
        """One conditional write of the document with ``change``, done when it lands or when it is found in place
        after its retry was refused; retried after a 409 and after finding in place an earlier write of this holder
        (one whose step failed, but that landed); ``LeaseLost`` when another writer's write is in place, or once
        the holder's expiry passed."""
        with self._lock:
            if self.released:
                raise LeaseLost(f"s3://{self.bucket}/{self.key}: this holder released the lease, so it writes no more")
            for attempt in range(ATTEMPTS):
                if self.monotonic() >= self.expires:
                    seconds = self.ttl.total_seconds()
                    raise self._lost(f": it could not renew it within {seconds:g} s, so another run may take it over")
                self._writes += 1
                document = replace(self.document, renewed_at=self.now().isoformat(), write=self._writes, **change)
                sent = self.monotonic()
                self.requests += 1
                try:
                    put = self.s3.put_object(
                        Bucket=self.bucket, Key=self.key, Body=document.to_json(), IfMatch=self.etag
                    )
                except ClientError as exc:
                    if not lost_race(exc):
                        raise
                    _back_off(exc, attempt)
                    found = self._own_or_lost(exc)
                    if found.document.write == document.write:  # this write landed, its answer was lost
                        self._landed(found.document, found.etag, sent)
                        return
                    # A 409, or an earlier write of this holder: its expiry counts from before it, left as it is.
                    self.document, self.etag = found.document, found.etag
                    if attempt == ATTEMPTS - 1:
                        raise
                    continue
                self._landed(document, put["ETag"], sent)
                return

    def _landed(self, document: LeaseDocument, etag: str, sent: float) -> None:
        self.document, self.etag = document, etag
        self.expires = sent + self.ttl.total_seconds()
        self.released = document.run_id is None

    def _own_or_lost(self, refusal: ClientError) -> Stored:
        """The lease as read after a refused write, when it holds a write of this holder (else ``LeaseLost``)."""
        self.requests += 1
        found = _read(self.s3, self.bucket, self.key)
        if found is None:
            raise self._lost(" to a run that deleted it") from refusal
        if found.document.writer != self.document.writer:
            raise self._lost(f" to run {found.document.run_id} (token {found.document.token})") from refusal
        return found

    def _lost(self, why: str) -> LeaseLost:
        return LeaseLost(
            f"run {self.document.run_id} lost s3://{self.bucket}/{self.key} (token {self.document.token}){why}; "
            "nothing more of this run is committed for it — the holder redoes the stored work"
        )


def quiet_spell(ttl: timedelta) -> timedelta:
    """How long a holder's lease of ``ttl`` goes without a write before ``kept_alive`` renews it: half the TTL. Its
    checks come every sixth of the TTL, so a renewal has three tries (the first may meet an S3 error) before the
    holder's expiry, and a plan that commits within half the TTL of its last write costs no renewal."""
    return ttl / 2


@contextmanager
def kept_alive(leases: Sequence[Lease], every: timedelta) -> Iterator[None]:
    """Renew each lease in ``leases`` once ``every`` passed since its last write (a durable step's or a renewal's), from
    one background thread that checks every third of ``every``, until the block ends (with ``every`` the ``quiet_spell``
    of the TTL, that leaves three checks to renew in before the holder's expiry). A renewal that fails (an S3 or network
    error, a malformed answer) is tried again at the next beat; a lease that is lost (another run took it, or the
    holder's expiry passed) or released is renewed no more, and a lost one's holder's next durable step raises
    ``LeaseLost``."""
    stop = threading.Event()
    live = list(leases)

    def beat() -> None:
        while live and not stop.wait(every.total_seconds() / 3):
            for lease in list(live):
                try:
                    if lease.released:
                        live.remove(lease)
                        continue
                    lease.renew(quiet_for=every)
                except LeaseLost:
                    live.remove(lease)
                except Exception:  # noqa: BLE001, S112 - tried again at the next beat, whatever failed this one
                    # A 5xx, timeout or reset left after botocore's retries, or an answer without a usable Date:
                    # never the end of the renewals. A lease that stays unrenewed expires, and the holder's next
                    # durable step raises LeaseLost.
                    continue

    with in_background(beat, stop, "lease renewals"):
        yield


@contextmanager
def in_background(loop: Callable[[], None], stop: threading.Event, name: str) -> Iterator[None]:
    """``loop`` on a daemon thread of its own while the block runs; at the block's end ``stop`` is set (``loop``
    watches it) and the thread joined."""
    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _read(s3: Any, bucket: str, key: str) -> Stored | None:
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise
    date = got["ResponseMetadata"]["HTTPHeaders"].get("date")
    read = parsedate_to_datetime(date) if date else None
    if read is None or read.tzinfo is None:
        raise RuntimeError(f"s3://{bucket}/{key}: the answer has no usable Date header ({date}), S3's clock for leases")
    document = LeaseDocument.parse(json.loads(got["Body"].read()))
    return Stored(document, got["ETag"], got["LastModified"], read)


def _back_off(refusal: ClientError, attempt: int) -> None:
    """Wait before retrying a write that met another in progress (409); a lost race (412, 404) is retried at once."""
    if str(refusal.response["Error"]["Code"]) in _IN_PROGRESS:
        time.sleep(BACKOFF.total_seconds() * 2**attempt)


def create_once(s3: Any, bucket: str, key: str, document: dict[str, Any]) -> bool:
    """Create ``key`` holding ``document`` unless it exists, with S3's real semantics (as the lease's writes): True
    when this call created it. A 409 (another write in progress) is retried after a back-off; after a 412 the
    object is read back, and is this call's when it holds the writer id this call added (its write landed, its answer
    was lost and botocore's retry was refused)."""
    writer = uuid.uuid4().hex
    body = json.dumps({**document, "writer": writer}, sort_keys=True).encode()
    for attempt in range(ATTEMPTS):
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            return True
        except ClientError as exc:
            if not lost_race(exc):
                raise
            if str(exc.response["Error"]["Code"]) in _IN_PROGRESS:
                _back_off(exc, attempt)
                continue
            try:
                found = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            except ClientError as gone:
                if gone.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                    raise
                continue  # deleted since: create it again
            return bool(found.get("writer") == writer)
    raise RuntimeError(f"s3://{bucket}/{key}: {ATTEMPTS} conditional creates met other writes in progress (409)")


def lost_race(exc: ClientError) -> bool:
    """Whether S3 refused a conditional write because another writer got there first (``_CONFLICT``)."""
    return str(exc.response["Error"]["Code"]) in _CONFLICT
