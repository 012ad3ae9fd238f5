"""API calls in a benchmark process, through every boto3 client it makes from then on (the default session's):
counted as ``service.Operation``, one per call (botocore's retries are not counted again); S3's delayed as AWS's
round trip would delay them."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import boto3


def count_every_client(counter: Counter[str]) -> None:
    """From now on, count the calls of every client made through boto3's default session into ``counter``."""
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    session: Any = boto3.DEFAULT_SESSION

    def _count(model: Any, **_: Any) -> None:
        counter[f"{model.service_model.service_name}.{model.name}"] += 1

    session.events.register("before-call.*.*", _count)


def delay_every_s3_request(seconds: float) -> None:
    """From now on, every S3 request of a client made through boto3's default session waits ``seconds`` before it
    is sent: moto answers within milliseconds, S3 in AWS in tens of them (its small objects' first-byte latency).
    Only this process's: a Spark executor's requests are not delayed."""
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    session: Any = boto3.DEFAULT_SESSION

    def _wait(**_: Any) -> None:
        time.sleep(seconds)

    session.events.register("before-send.s3", _wait)
