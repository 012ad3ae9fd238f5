"""boto3 clients for kafkalake: one factory, botocore's own retry modes for throttling, and a count of the retries
they made."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

RETRIES = Config(retries={"mode": "adaptive", "max_attempts": 8}, connect_timeout=5, read_timeout=30)


class AwsTarget(Protocol):
    """Where the AWS APIs are: a region, and an endpoint URL only off AWS (the local stack)."""

    @property
    def region(self) -> str: ...

    @property
    def aws_endpoint_url(self) -> str | None: ...


def make_client(target: AwsTarget, service: str, connections: int | None = None) -> Any:
    """A client with botocore's adaptive retries; credentials come from the default chain (the role in AWS).
    ``connections``: how many it keeps open, for a client that many threads share (botocore's default is 10)."""
    config = RETRIES if connections is None else RETRIES.merge(Config(max_pool_connections=connections))
    return boto3.client(service, config=config, region_name=target.region, endpoint_url=target.aws_endpoint_url)


class RetryCount:
    """The retries botocore made for a client's calls (503 SlowDown, 500 InternalError, timeouts, ...), summed from
    each call's ``ResponseMetadata.RetryAttempts``, also of calls that failed after their last attempt; of every call
    of ``client``, or, without one, of the calls ``add`` is given (``ClientShare``)."""

    def __init__(self, client: Any | None = None) -> None:
        self.total = 0
        self._lock = threading.Lock()
        if client is not None:
            client.meta.events.register("after-call", self._after_call)

    def _after_call(self, parsed: dict[str, Any] | None = None, **_: Any) -> None:
        self.add(parsed)

    def add(self, parsed: dict[str, Any] | None) -> None:
        """Count the retries of the call that answered ``parsed``."""
        retries = int((parsed or {}).get("ResponseMetadata", {}).get("RetryAttempts", 0))
        with self._lock:
            self.total += retries


class ClientShare:
    """One user's calls through a client several users share (boto3 clients are thread-safe), with the retries
    botocore made for those calls alone (``retries``, counted as ``RetryCount`` counts a whole client's, failed calls
    included). A run's topics share one S3 client this way, each still reporting its own retries: a client per topic
    cost 3-5 ms of CPU to make and a new connection on its first call (measured locally; a TLS handshake in AWS).
    Everything but the client's API operations (``meta``, ``exceptions``, paginators, whose calls go uncounted) is
    the client's own."""

    def __init__(self, client: Any) -> None:
        self.client, self.retries = client, RetryCount()
        self._operations = frozenset(client.meta.method_to_api_mapping)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.client, name)
        if name not in self._operations:
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                response = found(*args, **kwargs)
            except ClientError as exc:
                self.retries.add(exc.response)
                raise
            self.retries.add(response)
            return response

        return call


def list_objects(s3: Any, bucket: str, prefix: str, suffix: str = "") -> dict[str, int]:
    """Key → size of every object under ``prefix`` (ending with ``suffix``), all pages."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(suffix)}


def list_modified(s3: Any, bucket: str, prefix: str, suffix: str = "") -> dict[str, datetime]:
    """Key → last modified of every object under ``prefix`` (ending with ``suffix``), all pages."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    found = (o for page in pages for o in page.get("Contents", []))
    return {o["Key"]: o["LastModified"] for o in found if o["Key"].endswith(suffix)}


def read_json(s3: Any, bucket: str, key: str) -> Any | None:
    """The JSON document at ``key``, or None when there is no such object."""
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None
        raise
