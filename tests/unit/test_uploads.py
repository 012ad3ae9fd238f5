"""A task's uploads (``spark_jobs.archiver.uploads``): several objects in flight at once, never more bytes in flight
than the bound (one object however large), every upload ended before the task returns, and a refused one is the
task's failure, naming the object."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from spark_jobs.archiver.uploads import ObjectNotWritten, Uploads


class SlowS3:
    """Records each put and how many were in flight at once; ``together`` puts must overlap to get through."""

    def __init__(self, together: int = 1, refuse: str | None = None) -> None:
        self.barrier = threading.Barrier(together, timeout=10) if together > 1 else None
        self.refuse, self.lock = refuse, threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.stored: dict[str, bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **extra: Any) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.barrier is not None:
                self.barrier.wait()  # broken (raises) unless ``together`` puts are in flight at once
            if Key == self.refuse:
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "PutObject")
            self.stored[f"{Bucket}/{Key}"] = Body
        finally:
            with self.lock:
                self.in_flight -= 1


def test_objects_are_put_several_at_once_and_all_stored_before_the_task_returns() -> None:
    s3 = SlowS3(together=4)
    with Uploads(s3, "lake", uploads=4) as uploads:
        for i in range(8):
            uploads.put(f"k{i}", b"x" * i)
    assert s3.stored == {f"lake/k{i}": b"x" * i for i in range(8)}
    assert s3.most_in_flight == 4


def test_bytes_in_flight_stay_under_the_bound_but_a_large_object_still_goes() -> None:
    s3 = SlowS3()
    with Uploads(s3, "lake", uploads=8, max_bytes=10) as uploads:
        for i in range(6):
            uploads.put(f"k{i}", b"x" * 6)  # two of 6 bytes are over the bound of 10: one at a time
        uploads.put("big", b"x" * 100)
    assert s3.most_in_flight == 1
    assert len(s3.stored) == 7


def test_a_refused_object_fails_the_task_with_its_name() -> None:
    s3 = SlowS3(refuse="k3")
    refused = r"^cannot write s3://lake/k3: An error occurred \(AccessDenied\)"
    with pytest.raises(ObjectNotWritten, match=refused), Uploads(s3, "lake", uploads=2) as uploads:
        for i in range(6):
            uploads.put(f"k{i}", b"x")


def test_a_put_looks_only_at_the_uploads_not_yet_stored() -> None:
    """Each put checks the uploads started before it for a failure: stored ones are dropped from that list, so a task
    of thousands of objects does not check every earlier upload on each put (at 7,000 objects, 60 CPU-s of checks)."""
    s3 = SlowS3()
    with Uploads(s3, "lake", uploads=2) as uploads:
        for i in range(50):
            uploads.put(f"k{i}", b"x")
            uploads._pending[-1].result()  # this one is stored before the next put
        assert len(uploads._pending) <= 1
    assert len(s3.stored) == 50
