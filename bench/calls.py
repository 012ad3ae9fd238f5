"""API calls counted in a benchmark process: every boto3 client it makes from then on (the default session's),
as ``service.Operation``, one per call (botocore's retries are not counted again)."""

from __future__ import annotations

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
