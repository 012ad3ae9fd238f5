"""A task's object uploads in the background, a few at a time, while it goes on splitting and encoding.

A pass of light topics ends each task with a flush of every (member, version, Kafka partition, hour) group it holds:
hundreds of small objects, each a PUT of its own. One after the other, a task waits on S3 for each (on S3 a small PUT
takes tens of milliseconds: 234 objects a task, a pass of 156 topics on two cores, are seconds of waiting); a few at
once, the waits overlap. What is uploaded does not change: the same keys and bytes, each object whole or not at all,
and the task returns only once every upload has succeeded (``wait``): the outcome rows it then yields are what the
driver commits, so no plan commits an object that is not stored.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

UPLOADS = 8
"""Uploads in flight per task at most (boto3's connection pool holds 10 per client)."""
MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024
"""Bytes of objects in flight per task at most (one object however large): a heavy plan's objects are tens of MB, and
the Python worker's memory (``bench.sizing``) was sized for one at a time."""


class ObjectNotWritten(RuntimeError):
    """An object the task wrote was refused by S3: the task fails, and the plan with it."""


class Uploads:
    """Objects put to one bucket through ``s3`` (a boto3 client; thread-safe), at most ``uploads`` (``UPLOADS`` when
    None) and ``max_bytes`` at once."""

    def __init__(
        self, s3: Any, bucket: str, *, uploads: int | None = None, max_bytes: int = MAX_BYTES_IN_FLIGHT
    ) -> None:
        self.s3, self.bucket, self.max_bytes = s3, bucket, max_bytes
        at_once = uploads or UPLOADS  # UPLOADS read now: the uploads benchmark sets it
        self._pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="upload")
        self._slots = threading.Semaphore(at_once)
        self._room = threading.Condition()
        self._in_flight = 0
        self._pending: list[Future[None]] = []

    def put(self, key: str, body: bytes, **extra: Any) -> None:
        """Start putting ``body`` under ``key`` (``extra``: more arguments of ``put_object``); waits while the task
        has as many uploads or bytes in flight as it may. A failed upload is raised here or by ``wait``."""
        self._raise_failed()
        with self._room:
            self._room.wait_for(lambda: self._in_flight == 0 or self._in_flight + len(body) <= self.max_bytes)
            self._in_flight += len(body)
        self._slots.acquire()
        self._pending.append(self._pool.submit(self._put, key, body, extra))

    def _put(self, key: str, body: bytes, extra: dict[str, Any]) -> None:
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
        except ClientError as exc:
            raise ObjectNotWritten(f"cannot write s3://{self.bucket}/{key}: {exc}") from exc
        finally:
            self._slots.release()
            with self._room:
                self._in_flight -= len(body)
                self._room.notify_all()

    def _raise_failed(self) -> None:
        for future in [f for f in self._pending if f.done()]:
            future.result()
            self._pending.remove(future)

    def __enter__(self) -> Uploads:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Without an error, ``wait``; with one, the uploads not started are dropped and those in flight end (their
        failures are the task's failure already)."""
        if kind is None:
            self.wait()
            return
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wait(self) -> None:
        """Every upload started has succeeded; else the first failure is raised (after the others have ended)."""
        try:
            for future in self._pending:
                future.exception()
            for future in self._pending:
                future.result()
        finally:
            self._pending = []
            self._pool.shutdown(wait=True)
