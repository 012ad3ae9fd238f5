"""The offset audit: every offset from the first archived to the committed one accounted for exactly once.

Per Kafka partition, the archiver's receipts (``kafkalake.archive_receipts``) must tile the offsets without a gap or an
overlap, and end at the committed offset. The rows they say were stored must be in the live data objects: the raw
files no finished compaction replaced, plus the outputs of finished compactions (whose manifests record each
output's offset range and rows per Kafka partition). Rows are counted from Parquet footers only. Receipts are
compared with the objects in windows: a receipt's offsets, merged with its neighbours where a compacted output
spans them. Quarantined records are checked against the quarantine objects the receipts name.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kafkalake.archive_receipts import ArchiveReceipt, PartitionAccount, StoredObject
from kafkalake.aws import list_objects, read_json
from kafkalake.footer import read_footer
from kafkalake.layout import LayoutError, parse_data_key
from kafkalake.naming import consumer_group
from kafkalake.topic_catalog import Topic
from kafkalake_dev.checks.inventory import table_objects
from spark_jobs.compaction.manifest import DONE_STATES, Manifest


@dataclass(frozen=True)
class Problem:
    kafka_partition: int
    start: int
    end: int
    """Offsets ``[start, end)``."""
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"partition {self.kafka_partition} offsets {self.start}-{self.end - 1}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Piece:
    """Rows of one Kafka partition in one live data object, offsets ``first``..``last``."""

    key: str
    first: int
    last: int
    rows: int


@dataclass
class PartitionAudit:
    kafka_partition: int
    first: int | None = None
    end: int | None = None
    """The receipts cover ``[first, end)``."""
    committed: int | None = None
    receipts: int = 0
    read: int = 0
    stored: int = 0
    quarantined: int = 0
    dropped_tombstones: int = 0
    found: int = 0
    """Rows found in live data objects within the receipts' offsets."""
    problems: list[Problem] = field(default_factory=list)


@dataclass
class Lake:
    """What the audit reads of one topic: receipts, compaction manifests, the objects and their footer rows."""

    receipts: list[ArchiveReceipt]
    manifests: list[Manifest]
    raw: set[str]
    compacted: set[str]
    quarantine: set[str]
    rows: dict[str, int]


def read_lake(s3: Any, bucket: str, topic: Topic) -> Lake:
    """Listings, receipts and manifests, then the footer rows of every object the audit counts (in parallel)."""
    prefix = topic.prefix

    def documents(where: str, suffix: str) -> list[dict[str, Any]]:
        found = (read_json(s3, bucket, key) for key in sorted(list_objects(s3, bucket, where, suffix)))
        return [d for d in found if d is not None]  # None: deleted between the listing and the read

    receipts = [ArchiveReceipt.from_dict(d) for d in documents(prefix.receipts_prefix(), ".json")]
    manifests = [Manifest.from_dict(d) for d in documents(prefix.compaction_prefix(), "manifest.json")]
    raw, compacted = (set(found) for found in table_objects(s3, bucket, prefix))
    quarantine = {key for where in topic.quarantine_prefixes() for key in list_objects(s3, bucket, where, ".parquet")}
    counted = sorted(raw | compacted | {o.key for r in receipts for o in r.quarantine if o.key in quarantine})

    def rows(key: str) -> int:
        return int(read_footer(s3, bucket, key).num_rows)

    with ThreadPoolExecutor(max_workers=16) as pool:
        footer_rows = dict(zip(counted, pool.map(rows, counted), strict=True))
    return Lake(receipts, manifests, raw, compacted, quarantine, footer_rows)


def live_pieces(lake: Lake) -> tuple[dict[int, list[Piece]], list[Problem]]:
    """Per Kafka partition, the rows readers see: raw files no finished compaction replaced, and the outputs of
    finished compactions, split by Kafka partition as their manifests recorded."""
    done = [m for m in lake.manifests if m.state in DONE_STATES]
    replaced = {k for m in done for k in (*m.inputs, *m.superseded)}
    outputs = {key: spans for m in done for key, spans in m.output_ranges.items()}
    pieces: dict[int, list[Piece]] = {}
    problems = []
    for key, spans in sorted(outputs.items()):
        if key not in lake.compacted:
            problems += [
                Problem(s[0], s[1], s[2] + 1, "missing object", f"compacted output {key} is gone") for s in spans
            ]
        elif any(len(s) < 4 for s in spans) or sum(s[3] for s in spans) != lake.rows[key]:
            problems += [
                Problem(s[0], s[1], s[2] + 1, "unverifiable", f"{key}: footer and manifest rows differ") for s in spans
            ]
        else:
            for partition, first, last, rows in spans:
                pieces.setdefault(partition, []).append(Piece(key, first, last, rows))
    for key in sorted(lake.raw - replaced):
        try:
            parsed = parse_data_key(key)
        except LayoutError:
            continue  # not an archiver object: no offsets to account for
        pieces.setdefault(parsed.kafka_partition, []).append(
            Piece(key, parsed.first_offset, parsed.last_offset, lake.rows[key])
        )
    return pieces, problems


def audit(lake: Lake, committed: dict[int, int | None]) -> list[PartitionAudit]:
    """Per Kafka partition: the receipts' tiling, the rows they stored against the live objects, the quarantine."""
    accounts: dict[int, list[tuple[PartitionAccount, ArchiveReceipt]]] = {}
    for receipt in lake.receipts:
        for partition, account in receipt.partitions.items():
            accounts.setdefault(partition, []).append((account, receipt))
    pieces, unplaced = live_pieces(lake)
    results = []
    for partition in sorted(set(accounts) | set(committed)):
        mine = sorted(accounts.get(partition, []), key=lambda pair: (pair[0].start, pair[0].end))
        result = PartitionAudit(partition, committed=committed.get(partition))
        result.problems += [p for p in unplaced if p.kafka_partition == partition]
        if mine:
            _tiling(result, [a for a, _ in mine])
            _rows(result, mine, pieces.get(partition, []), lake)
            for _, receipt in mine:
                for stored in (o for o in receipt.quarantine if o.kafka_partition == partition):
                    _quarantined(result, stored, lake)
        elif result.committed:
            result.problems.append(Problem(partition, 0, result.committed, "gap", "committed, but no receipt at all"))
        results.append(result)
    return results


def _tiling(result: PartitionAudit, accounts: list[PartitionAccount]) -> None:
    """Receipts back to back from the first archived offset to the committed one; each balanced."""
    partition = result.kafka_partition
    result.first, result.end, result.receipts = accounts[0].start, max(a.end for a in accounts), len(accounts)
    for account in accounts:
        result.read += account.read
        result.stored += account.stored
        result.quarantined += account.quarantined
        result.dropped_tombstones += account.dropped_tombstones
        if not account.balanced():
            result.problems.append(
                Problem(
                    partition,
                    account.start,
                    account.end,
                    "unbalanced receipt",
                    f"read {account.read} != stored {account.stored} + quarantined {account.quarantined} + "
                    f"dropped tombstones {account.dropped_tombstones}",
                )
            )
    for earlier, later in itertools.pairwise(accounts):
        if later.start > earlier.end:
            result.problems.append(
                Problem(
                    partition,
                    earlier.end,
                    later.start,
                    "gap",
                    "no receipt covers these offsets (a retention loss accepted with "
                    "accept_data_loss, or a receipt deleted)",
                )
            )
        elif later.start < earlier.end:
            result.problems.append(
                Problem(
                    partition,
                    later.start,
                    min(earlier.end, later.end),
                    "overlap",
                    "two receipts cover these offsets (archived twice)",
                )
            )
    if result.committed is not None and result.committed > result.end:
        result.problems.append(
            Problem(partition, result.end, result.committed, "gap", "committed beyond the last receipt")
        )


@dataclass
class _Window:
    """Offsets ``[start, end)`` of one receipt, or of neighbours a compacted output spans."""

    start: int
    end: int
    expected: int
    objects: list[StoredObject]

    def merge(self, other: _Window) -> _Window:
        return _Window(
            min(self.start, other.start),
            max(self.end, other.end),
            self.expected + other.expected,
            self.objects + other.objects,
        )


def _rows(
    result: PartitionAudit, accounts: list[tuple[PartitionAccount, ArchiveReceipt]], pieces: list[Piece], lake: Lake
) -> None:
    """Stored rows against live objects, window by window; quarantined rows against their objects."""
    partition = result.kafka_partition
    windows = [
        _Window(a.start, a.end, a.stored, [o for o in r.data if o.kafka_partition == partition]) for a, r in accounts
    ]
    windows, counted = _place(result, windows, pieces, accounts[0][0].start)
    # Objects of one plan interleave their offsets (one object per business hour), so ranges may overlap: rows
    # are compared per window, where a duplicated object shows as more rows than the receipts stored.
    live = {p.key for p in counted}
    for window in sorted(windows, key=lambda w: w.start):
        found = sum(p.rows for p in counted if window.start <= p.first and p.last < window.end)
        result.found += found
        if found == window.expected:
            continue
        gone = [o for o in window.objects if o.key not in live and not _replaced(o, lake)]
        if found < window.expected and gone:
            result.problems += [
                Problem(partition, o.first, o.last + 1, "gap", f"{o.key} ({o.rows} rows) is gone") for o in gone
            ]
        else:
            kind = "gap" if found < window.expected else "overlap"
            detail = f"receipts stored {window.expected} rows, the live objects hold {found}"
            result.problems.append(Problem(partition, window.start, window.end, kind, detail))


def _place(
    result: PartitionAudit, windows: list[_Window], pieces: list[Piece], first: int
) -> tuple[list[_Window], list[Piece]]:
    """Each live piece into the window of its offsets (windows a piece spans are merged); pieces from before the
    first receipt are outside the audit, pieces no receipt covers are reported."""
    counted: list[Piece] = []
    for piece in sorted(pieces, key=lambda p: (p.first, p.last)):
        if piece.last < first:
            continue
        touched = [w for w in windows if w.start <= piece.last and piece.first < w.end]
        if not touched:
            detail = f"{piece.key}: no receipt has them"
            result.problems.append(Problem(result.kafka_partition, piece.first, piece.last + 1, "extra rows", detail))
            continue
        merged = touched[0]
        for other in touched[1:]:
            merged = merged.merge(other)
        windows = [w for w in windows if all(w is not t for t in touched)] + [merged]
        counted.append(piece)
    return windows, counted


def _replaced(stored: StoredObject, lake: Lake) -> bool:
    """The object went into a compaction that finished (its rows live on in the outputs)."""
    return any(stored.key in m.inputs or stored.key in m.superseded for m in lake.manifests if m.state in DONE_STATES)


def _quarantined(result: PartitionAudit, stored: StoredObject, lake: Lake) -> None:
    """A quarantine object the receipt names must be there with the records it says."""
    if stored.key not in lake.quarantine:
        detail = f"quarantine object {stored.key} ({stored.rows} records) is gone"
    elif lake.rows[stored.key] != stored.rows:
        detail = f"{stored.key} holds {lake.rows[stored.key]} records, its receipt says {stored.rows}"
    else:
        return
    result.problems.append(Problem(result.kafka_partition, stored.first, stored.last + 1, "gap", detail))


def committed_offsets(bootstrap: str, kafka_topic: str) -> dict[int, int | None]:
    """The archiver's committed offset per Kafka partition (None where it committed nothing)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": consumer_group(kafka_topic)})
    try:
        metadata = consumer.list_topics(kafka_topic, timeout=15).topics[kafka_topic]
        asked = [TopicPartition(kafka_topic, p) for p in sorted(metadata.partitions)]
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in consumer.committed(asked, timeout=10)}
    finally:
        consumer.close()
