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
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

from botocore.exceptions import ClientError

UPLOADS = 8
"""Uploads in flight per task at most (boto3's connection pool holds 10 per client)."""
MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024
"""Bytes of objects started and not yet stored, per task, at most (one object however large): a heavy plan's objects
are tens of MB, and the Python worker's memory (``bench.sizing``) was sized for one at a time."""


class ObjectNotWritten(RuntimeError):
    """S3 refused one of the plan's objects after botocore's retries; the message names the object and S3's answer
    (the driver sees it as the last line of the Python worker's traceback). The task fails, and its plan with it."""


class Uploads:
    """Objects put to one bucket through ``s3`` (a boto3 client; thread-safe), ``uploads`` at a time, with at most
    ``max_bytes`` of them started and not yet stored."""

    def __init__(self, s3: Any, bucket: str, *, uploads: int = UPLOADS, max_bytes: int = MAX_BYTES_IN_FLIGHT) -> None:
        self.s3, self.bucket, self.max_bytes = s3, bucket, max_bytes
        self._pool = ThreadPoolExecutor(max_workers=uploads, thread_name_prefix="upload")
        self._room = threading.Condition()
        self._in_flight = 0
        self._pending: list[Future[None]] = []

    def put(self, key: str, body: bytes, **extra: Any) -> None:
        """Start putting ``body`` under ``key`` (``extra``: more arguments of ``put_object``), once the bytes started
        and not yet stored leave room for it. A failed upload is raised here (the first one done) or by ``wait``."""
        self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]  # stored: dropped
        for failed in (f for f in self._pending if f.done()):
            failed.result()
        with self._room:
            self._room.wait_for(lambda: self._in_flight == 0 or self._in_flight + len(body) <= self.max_bytes)
            self._in_flight += len(body)
        self._pending.append(self._pool.submit(self._put, key, body, extra))

    def _put(self, key: str, body: bytes, extra: dict[str, Any]) -> None:
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
        except ClientError as exc:
            raise ObjectNotWritten(f"cannot write s3://{self.bucket}/{key}: {exc}") from exc
        finally:
            with self._room:
                self._in_flight -= len(body)
                self._room.notify_all()

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
        """Every upload started has succeeded; else the first failure is raised, the others dropped or ended."""
        try:
            wait(self._pending, return_when=FIRST_EXCEPTION)
            for future in self._pending:
                if future.done() and future.exception() is not None:
                    future.result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending = []
