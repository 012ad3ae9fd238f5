"""A moto server of the fleet benchmark's own (``python -m bench.fleet_moto -H host -p port``): the local stack's
(``kafkalake_dev.local.moto_server``, its patches and its call recording), less three more costs of moto's SQS that
grow with the messages a queue holds, so that a fleet of thousands of topics measures the jobs, not moto.

Every S3 event moto delivers to a queue is a ``SendMessage``, and moto's sends, receives and deletes each walk the
queue's messages, asking the clock once per message and per check:

- a send reads the queue's ``ContentBasedDeduplication`` from all its attributes, three of which
  (``ApproximateNumberOfMessages...``) walk every message, each check of each message asking the clock;
- a receive lists the visible messages the same way;
- a delete walks the messages twice per receipt handle, building each message's list of handles every time;

and a listing of S3 keys under a prefix walks every key of the bucket, each read through its store's versions, where
S3 reads the prefix's keys alone: the compactor's and the inventory's listings per table grow with the fleet.

With the archiver's events waiting in the queue until the drain (19,200 data objects at 1,600 topics), that is
quadratic in the fleet: py-spy on the stack's server caught it in ``Message.delayed`` under ``send_message`` while a
400-topic archiver run waited on it (moto at 100% of a core, the run's own processes idle). Here each walk asks the
clock once, a batch of deletes finds its messages in one walk, and a listing reads only the keys its prefix matches
(the names are still walked, as plain strings). The answers are the same; the counts ``GetQueueAttributes`` gives
are as of one instant. SQS answers a send, a receive and a delete whatever the queue holds.
"""

from __future__ import annotations

import runpy
from collections.abc import Iterator
from typing import Any

from moto.core.utils import unix_time_millis
from moto.s3.models import FakeTableStorageBucket, S3Backend
from moto.sqs.models import Queue, SQSBackend


def _visible(self: Queue) -> list[Any]:
    now = unix_time_millis()
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def _not_visible(self: Queue) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if not now > m.visible_at)


def _delayed(self: Queue) -> int:
    now = unix_time_millis()
    return sum(1 for m in self._messages if now < m.delayed_until)


class _PrefixKeys:
    """The keys of a bucket's store under a prefix, as ``S3Backend.list_objects`` walks them (``items``)."""

    def __init__(self, store: Any, prefix: str) -> None:
        self.store, self.prefix = store, prefix

    def items(self) -> Iterator[tuple[str, Any]]:
        for name in [k for k in dict.keys(self.store) if k.startswith(self.prefix)]:
            try:
                yield name, self.store[name]
            except (KeyError, IndexError):  # deleted meanwhile
                continue


class _PrefixBucket:
    def __init__(self, bucket: Any, prefix: str) -> None:
        self.keys = _PrefixKeys(bucket.keys, prefix)


LIST_OBJECTS = S3Backend.list_objects


def list_objects(self: S3Backend, bucket: Any, prefix: str | None, *rest: Any, **named: Any) -> Any:
    """moto's ``list_objects``, walking only the keys under ``prefix`` (its other work unchanged)."""
    if prefix and not isinstance(bucket, FakeTableStorageBucket):
        bucket = _PrefixBucket(bucket, prefix)
    return LIST_OBJECTS(self, bucket, prefix, *rest, **named)


def delete_batch(self: SQSBackend, queue_name: str, receipts: list[dict[str, Any]]) -> tuple[list[str], list[Any]]:
    """moto's ``delete_message_batch``, its messages found by their receipt handles in one walk of the queue."""
    queue = self.get_queue(queue_name)
    handles = {r["ReceiptHandle"] for r in receipts} - queue.deleted_messages
    doomed = {
        id(m): m
        for m in queue._messages
        if m.receipt_handle in handles or any(h in handles for h in m._old_receipt_handles)
    }
    found = {h for m in doomed.values() for h in m.all_receipt_handles}
    success, errors = [], []
    for receipt in receipts:
        handle = receipt["ReceiptHandle"]
        if handle in found or handle in queue.deleted_messages:
            success.append(receipt["Id"])
        else:
            errors.append(
                {
                    "Id": receipt["Id"],
                    "SenderFault": True,
                    "Code": "ReceiptHandleIsInvalid",
                    "Message": f'The input receipt handle "{handle}" is not a valid receipt handle.',
                }
            )
    for message in doomed.values():
        queue.pending_messages.discard(message)
        queue.deleted_messages.update(message.all_receipt_handles)  # type: ignore[arg-type]
    queue._messages = [m for m in queue._messages if id(m) not in doomed]
    return success, errors


if __name__ == "__main__":
    Queue.messages = property(_visible)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_not_visible = property(_not_visible)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_delayed = property(_delayed)  # type: ignore[assignment,method-assign]
    SQSBackend.delete_message_batch = delete_batch  # type: ignore[method-assign]
    S3Backend.list_objects = list_objects  # type: ignore[method-assign]
    runpy.run_module("kafkalake_dev.local.moto_server", run_name="__main__", alter_sys=True)
