"""Erasure requests and receipts: what is to be erased, recorded durably before any work, and the proof it was.

A request names subjects by their keyed hash (``kafkalake.personal.PseudonymKey.digest``), never in clear (under
the current key, and under the earlier key the secret still keeps after a rotation: rows hashed before it hold
that key's pseudonyms), and is
stored at ``kafkalake.layout.erasure_request_key`` before anything else happens. It comes from:

- ``kafkalake erase --subject <id>`` (or an object of the same format put under the requests prefix in AWS): the
  subject's rows in every table that declares ``subject_fields`` or ``erasure: by_key`` (or the tables named);
- the archiver, for a plan's tombstones of a ``by_key`` topic: each key's rows in that topic's table whose
  (Kafka partition, offset) precede its tombstone (``Subject.before_offset``), the key digested under every key
  the secret keeps, as an explicit subject is.

The erasure job (``spark_jobs.erasure``) ends each request with a receipt at ``erasure_receipt_key``: hashed
subjects, tables and partitions rewritten, rows removed per table, objects and versions deleted, start and finish.
A request without a receipt is pending; past its deadline (``within_days`` after its creation) it is late. A done
tombstone request stays watched for ``within_days`` after its receipt: rows it covers in objects written since its
batch started (late) are erased by the next run, and its receipt amended. A request done and no longer watched
(``finished``) is then replaced by what remains of it (``ErasureRequest.remains``: its receipt tokens, no digest),
its earlier versions deleted: a pseudonym of an erased subject is personal data too.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from kafkalake.aws import list_objects, read_json
from kafkalake.layout import erasure_receipt_key, erasure_receipts_prefix, erasure_request_key, erasure_requests_prefix

DIGEST = re.compile(r"^[0-9a-f]{64}$")
REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}$")


class RequestInvalid(ValueError):
    """A stored request that does not follow the format; the message names the object and the field."""


class Source(StrEnum):
    REQUEST = "request"
    """``kafkalake erase`` or an object put by hand."""
    TOMBSTONES = "tombstones"
    """The archiver, from a plan's tombstones of a ``by_key`` topic."""


@dataclass(frozen=True)
class Subject:
    """One subject: its keyed hash; for a tombstone, the one Kafka partition and the offset its rows precede."""

    digest: str
    kafka_partition: int | None = None
    before_offset: int | None = None
    earlier_keys: dict[str, str] = field(default_factory=dict)
    """Key id → the subject's digest under each earlier key the secret still kept when it was requested (a rotated
    one): rows whose stored pseudonyms that key made are found by them (``digest`` is under the request's key)."""

    def digests(self, key_id: str) -> dict[str, str]:
        """Key id → digest: the request's key (``key_id``) and the earlier ones."""
        return {key_id: self.digest, **self.earlier_keys}


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    created_at: str
    source: Source
    subjects: tuple[Subject, ...]
    tables: tuple[str, ...] = ()
    """``database.table`` names; empty for every erasable table of the environment."""
    within_days: int = 1
    key_id: str = ""
    """The pseudonym key the subjects' ``digest`` were taken with (required in a stored request)."""
    done: bool = False
    """What remains of a finished request (``remains``): each subject's ``digest`` is its receipt token, with no
    ``earlier_keys``, so it links the subject to no pseudonym."""

    @property
    def deadline(self) -> datetime:
        return datetime.fromisoformat(self.created_at) + timedelta(days=self.within_days)

    def tokens(self) -> list[str]:
        """The subjects as a receipt names them (``receipt_token``)."""
        return sorted({s.digest if self.done else receipt_token(s.digest) for s in self.subjects})

    def remains(self) -> ErasureRequest:
        """What is kept of the request once it is finished: each subject's receipt token in place of its digests;
        its Kafka partition and offset, tables, key id and dates as they were."""
        if self.done:
            return self
        subjects = tuple(Subject(receipt_token(s.digest), s.kafka_partition, s.before_offset) for s in self.subjects)
        return replace(self, subjects=subjects, done=True)

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "source": str(self.source)}, sort_keys=True, indent=1).encode()

    @classmethod
    def parse(cls, raw: Any, where: str) -> ErasureRequest:
        """A stored request, checked: every digest 64 lower-case hex characters (a clear identifier is refused)."""
        try:
            subjects = tuple(Subject(**s) for s in raw["subjects"])
            request = cls(
                str(raw["request_id"]),
                str(raw["created_at"]),
                Source(raw["source"]),
                subjects,
                tuple(raw.get("tables", ())),
                int(raw.get("within_days", 1)),
                str(raw.get("key_id", "")),
                bool(raw.get("done", False)),
            )
            datetime.fromisoformat(request.created_at)
        except (KeyError, TypeError, ValueError) as exc:
            raise RequestInvalid(
                f"{where}: not an erasure request ({type(exc).__name__} at {exc}); write it as `kafkalake erase` "
                "does (kafkalake.erasure.ErasureRequest)"
            ) from None
        if not REQUEST_ID.match(request.request_id) or not subjects:
            raise RequestInvalid(f"{where}: request_id must be a plain name and subjects must not be empty")
        if any(not DIGEST.match(d) for s in subjects for d in s.digests(request.key_id).values()):
            raise RequestInvalid(f"{where}: a subject is not a keyed hash (64 hex characters); never store it in clear")
        if not request.key_id:
            raise RequestInvalid(f"{where}: key_id must name the pseudonym key the subjects' digests were taken with")
        return request


def new_request(
    digests: Iterable[str | Mapping[str, str]], tables: Iterable[str], within_days: int, key_id: str, now: datetime
) -> ErasureRequest:
    """An explicit request for ``digests``: a random id (nothing of the subject in its name). Each subject is its
    digest under ``key_id``, or key id → digest under every key the secret keeps (``kafkalake.personal.Keyring``)."""
    request_id = f"{now.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:12]}"
    found = dict(_under(d, key_id) for d in digests)
    subjects = tuple(Subject(d, earlier_keys=found[d]) for d in sorted(found))
    return ErasureRequest(request_id, now.isoformat(), Source.REQUEST, subjects, tuple(tables), within_days, key_id)


def tombstone_request(
    table: str,
    plan_id: str,
    created_at: str,
    tombstones: Iterable[tuple[str | Mapping[str, str], int, int]],
    *,
    within_days: int,
    key_id: str,
) -> ErasureRequest:
    """A plan's tombstones (digest of the key under ``key_id``, or key id → digest under every key the archiver
    holds; Kafka partition; offset) as one request, named after the plan so a redo of the plan writes the same
    object; per key and partition, the last tombstone covers the earlier ones. A digest under an earlier key (the
    one a rotation replaced) finds the rows whose ``_key`` that key hashed (``Subject.earlier_keys``)."""
    latest: dict[tuple[str, int], int] = {}
    earlier: dict[str, dict[str, str]] = {}
    for digests, partition, offset in tombstones:
        digest, earlier[digest] = _under(digests, key_id)
        latest[(digest, partition)] = max(offset, latest.get((digest, partition), -1))
    subjects = tuple(Subject(d, p, o, earlier[d]) for (d, p), o in sorted(latest.items()))
    request_id = f"tombstones-{table}-{plan_id}"
    return ErasureRequest(request_id, created_at, Source.TOMBSTONES, subjects, (table,), within_days, key_id)


def _under(digests: str | Mapping[str, str], key_id: str) -> tuple[str, dict[str, str]]:
    """A subject's digest under ``key_id``, and key id → its digest under each other key."""
    if isinstance(digests, str):
        return digests, {}
    return digests[key_id], {i: d for i, d in sorted(digests.items()) if i != key_id}


def receipt_token(digest: str) -> str:
    """What a receipt names a subject by: the SHA-256 of its request digest. Who holds the key and the identifier
    recomputes it to find the receipt; it equals no pseudonym any table or index holds, so a receipt kept for
    years links the erased person to nothing left in the lake."""
    return hashlib.sha256(digest.encode()).hexdigest()


@dataclass
class TableErasure:
    """What one table's part of a request did."""

    partitions: list[list[str]] = field(default_factory=list)
    rows_removed: int = 0
    quarantine_rows_removed: int = 0
    quarantine_objects_without_raw: int = 0
    """Quarantine objects whose raw bytes the request removed, offsets and errors kept: its subject is found by
    field, which the bytes of a record that failed to decode cannot show."""


@dataclass
class ErasureReceipt:
    request_id: str
    subjects: list[str]
    """The request's subjects as ``receipt_token``s (never the identifiers, nor their pseudonyms)."""
    started_at: str
    finished_at: str
    tables: dict[str, TableErasure] = field(default_factory=dict)
    objects_deleted: list[str] = field(default_factory=list)
    versions_deleted: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    def amend(self, earlier: dict[str, Any]) -> None:
        """Add what the request's earlier receipt proved (a tombstone request reopened for late rows)."""
        self.started_at = earlier["started_at"]
        for name, table in earlier["tables"].items():
            mine = self.tables.setdefault(name, TableErasure())
            mine.partitions += [p for p in table["partitions"] if p not in mine.partitions]
            mine.rows_removed += table["rows_removed"]
            mine.quarantine_rows_removed += table["quarantine_rows_removed"]
            mine.quarantine_objects_without_raw += table.get("quarantine_objects_without_raw", 0)  # older receipts
        self.objects_deleted = sorted({*self.objects_deleted, *earlier["objects_deleted"]})
        self.versions_deleted += earlier["versions_deleted"]


@dataclass(frozen=True)
class RequestStore:
    """The environment's requests and receipts in the bucket."""

    s3: Any
    bucket: str
    env: str

    def put(self, request: ErasureRequest) -> str:
        key = erasure_request_key(self.env, request.request_id)
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=request.to_json())
        return key

    def requests(self) -> tuple[list[ErasureRequest], list[str]]:
        """Every stored request, and a problem per object that is not one (left for a person to fix)."""
        found, problems = [], []
        for key in sorted(list_objects(self.s3, self.bucket, erasure_requests_prefix(self.env), ".json")):
            try:
                found.append(ErasureRequest.parse(read_json(self.s3, self.bucket, key), f"s3://{self.bucket}/{key}"))
            except (RequestInvalid, json.JSONDecodeError) as exc:
                problems.append(str(exc) if isinstance(exc, RequestInvalid) else f"{key}: not JSON")
        return found, problems

    def receipts(self) -> dict[str, dict[str, Any]]:
        """Request id → its receipt."""
        prefix = erasure_receipts_prefix(self.env)
        keys = list_objects(self.s3, self.bucket, prefix, ".json")
        return {k.removeprefix(prefix).removesuffix(".json"): read_json(self.s3, self.bucket, k) or {} for k in keys}

    def put_receipt(self, receipt: ErasureReceipt) -> str:
        key = erasure_receipt_key(self.env, receipt.request_id)
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=receipt.to_json())
        return key


class Status(StrEnum):
    PENDING = "pending"
    DONE = "done"
    LATE = "late"
    """Pending past the deadline, or done after it."""


def status(request: ErasureRequest, receipt: dict[str, Any] | None, now: datetime) -> Status:
    if receipt is None:
        return Status.LATE if now > request.deadline else Status.PENDING
    return Status.LATE if datetime.fromisoformat(receipt["finished_at"]) > request.deadline else Status.DONE


def pending(requests: Iterable[ErasureRequest], receipts: dict[str, Any]) -> list[ErasureRequest]:
    return [r for r in requests if r.request_id not in receipts]


def watched(
    requests: Iterable[ErasureRequest], receipts: dict[str, Any], now: datetime
) -> list[tuple[ErasureRequest, datetime]]:
    """Done tombstone requests still within ``within_days`` of their receipt, each with the start of its batch:
    objects written since may hold rows the tombstone precedes that landed late (a redone archiver plan)."""
    found = []
    for request in requests:
        receipt = receipts.get(request.request_id)
        if request.source != Source.TOMBSTONES or request.done or not receipt:
            continue
        if now <= datetime.fromisoformat(receipt["finished_at"]) + timedelta(days=request.within_days):
            found.append((request, datetime.fromisoformat(receipt["started_at"])))
    return found


def finished(requests: Iterable[ErasureRequest], receipts: dict[str, Any], now: datetime) -> list[ErasureRequest]:
    """Requests with a receipt, no longer watched and still holding their digests: due to be replaced by what remains
    of them (an explicit request at its receipt, a tombstone request once its watch is over)."""
    requests = list(requests)
    still = {r.request_id for r, _ in watched(requests, receipts, now)}
    return [r for r in requests if r.request_id in receipts and r.request_id not in still and not r.done]
