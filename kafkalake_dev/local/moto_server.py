"""moto's server as the local stack runs it: ``python -m kafkalake_dev.local.moto_server -H host -p port``.

moto's own ``main``, less four costs of its server that the suite's tens of thousands of requests add up (seen
with py-spy on the server during the stack tests and the fleet benchmark; the answers are unchanged):

- ``ListObjectVersions`` deep-copies every version of every key in the bucket, its bytes included, to mark the
  copies' ``is_latest`` (61% of the server's CPU during the erasure tests, which list versions to follow a run's
  progress). Here each version is copied without its bytes: a new object of a subclass sharing the original's
  attributes (its buffer included, which the copy never closes), so setting ``is_latest`` on it leaves the stored
  version alone.
- ``ReceiveMessage`` checks each message it hands out against the queue's retention period by building every
  attribute of the queue, three times, and three of them (``ApproximateNumberOfMessages...``) walk every message of
  the queue, the in-flight ones included: a receive of 10 cost ~60 passes over the queue. The maintainer deletes a
  drain's messages at its end, so the fleet benchmark's drain of 1,921 messages spent ~85% of its wall time waiting
  for moto's receives (quadratic in the messages in flight). Here the check reads the retention period alone
  (``retained``).
- The names of moto's service folders, listed from disk by ``get_backend_for_host`` for each request, are listed
  once.
- werkzeug's access log (a line per request) is off; its warnings and errors stay.

It also records the pipeline principals' calls for the permission check (``kafkalake_dev.local.call_recording``).
"""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace
from typing import Any

from moto import backends
from moto import server as moto_server
from moto.core.utils import unix_time
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.s3 import models as s3_models
from moto.server import main
from moto.sqs.models import Message, SQSBackend

from kafkalake_dev.local.call_recording import Recorder, recording_app

SERVICE_FOLDERS = tuple(backends.list_of_moto_modules())
TWINS: dict[type[Any], type[Any]] = {}


def listed_once() -> tuple[str, ...]:
    return SERVICE_FOLDERS


def versions_without_bytes(versions: list[Any]) -> list[Any]:
    """What ``list_object_versions`` deep-copies (one key's versions), copied as the listing needs them."""
    copies = []
    for version in versions:
        twin = object.__new__(listing_twin(type(version)))
        twin.__dict__.update(version.__dict__)
        copies.append(twin)
    return copies


def listing_twin(kind: type[Any]) -> type[Any]:
    """``kind`` whose objects leave the shared bytes open when they go: a stored key closes its buffer in
    ``__del__``, and the buffer is the stored version's own."""
    if kind not in TWINS:
        TWINS[kind] = type(kind.__name__, (kind,), {"__del__": lambda _self: None, "__module__": kind.__module__})
    return TWINS[kind]


def retained(backend: SQSBackend, queue_name: str, message: Message) -> bool:
    """moto's ``SQSBackend.is_message_valid_based_on_retention_period``, reading the queue's retention period alone
    (moto builds all the queue's attributes for it, message counts included, for each message received)."""
    period = int(vars(backend.get_queue(queue_name))["message_retention_period"])  # set from the queue's attributes
    return bool(period + message.sent_timestamp / 1000 > unix_time())  # type: ignore[operator]  # set when sent


class RecordingDispatcher(DomainDispatcherApplication):
    """moto's dispatcher, its requests passed through ``recording_app``."""

    recorder = Recorder()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return recording_app(super().__call__, self.recorder)(environ, start_response)


if __name__ == "__main__":
    moto_server.DomainDispatcherApplication = RecordingDispatcher  # type: ignore[attr-defined]
    backends.list_of_moto_modules = listed_once
    SQSBackend.is_message_valid_based_on_retention_period = retained  # type: ignore[method-assign,assignment]
    # moto.s3.models uses the copy module twice: copy.copy (kept) and, in list_object_versions only, copy.deepcopy
    s3_models.copy = SimpleNamespace(copy=copy.copy, deepcopy=versions_without_bytes)  # type: ignore[attr-defined,assignment]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    main()
