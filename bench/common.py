"""Shared benchmark plumbing: results as JSON under bench/results/, the archiver children's Spark session."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalake.settings import Endpoints
from kafkalake_dev.local import local_endpoints
from kafkalake_dev.sandbox import with_bucket
from kafkalake_dev.spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS = Path(__file__).resolve().parent / "results"
BUCKET = "kafkalake-bench"
"""The archiver benchmarks' bucket."""


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{name}-{stamp}.json"
    document = {"benchmark": name, "utc": stamp, "machine": platform.platform(), **payload}
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(json.dumps(document, indent=2, sort_keys=True))
    print(f"[bench] wrote {path}")
    return path


def started_session(app_name: str) -> tuple[SparkSession, Endpoints, float]:
    """A local Spark session on the local stack and BUCKET, once it has run a job, and the seconds that took."""
    started = time.monotonic()
    endpoints = with_bucket(local_endpoints(), BUCKET)
    spark = local_session(endpoints, app_name)
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()  # the session is up
    return spark, endpoints, time.monotonic() - started
