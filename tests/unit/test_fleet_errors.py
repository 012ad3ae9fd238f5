"""What a failed topic's error says: the exception a Spark task raised rather than the Spark error's frames, and how
to fix an access denial (the S3 permissions on the topic's prefixes, or the lake key's); retries counted per client;
the pseudonym key read once, and only the topics that need it failing without it; pandas imported in the
background from the run's start."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from pyspark.sql import SparkSession
from pyspark.sql.pandas import utils as pandas_utils

from infra.repo import catalog_dir
from kafkalake.aws import RETRIES, ClientShare, RetryCount
from kafkalake.endpoints import Endpoints
from kafkalake.personal import KeyInvalid, Keyring, PiiAction, PseudonymKey
from kafkalake.topic_catalog import Topic, load_topic_catalog
from spark_jobs.archiver import job
from spark_jobs.archiver.job import MAX_ERROR_CHARS, explain, read_pseudonym_key, topic_key, worker_error
from spark_jobs.common import Run
from tests.faults import s3_answers

TOPIC = load_topic_catalog(catalog_dir()).get("card-authorized", "staging")
KEY = f"{TOPIC.prefix.data_prefix()}schema_version=1/dt=2026-11-20/hour=09/card-authorized+0+403-500.parquet"
DENIED = "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied"


def spark_error(*exceptions: str) -> Exception:
    """The text of PySpark's PythonException for a task that raised ``exceptions`` (each the cause of the next)."""
    frames = (
        'Traceback (most recent call last):\n  File "/worker.py", line 1231, in main\n    process()\n    ^^^^^^^^^\n'
    )
    chained = "\nThe above exception was the direct cause of the following exception:\n\n".join(
        f"{frames}{exception}\n" for exception in exceptions
    )
    header = "An exception was thrown from the Python worker. Please see the stack trace below."
    return Exception(f"\n  {header}\n{chained}")


def client_error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "PutObject")


def test_the_error_of_a_failed_task_is_the_exception_it_raised_with_the_fix_for_a_denial() -> None:
    refused = f"spark_jobs.archiver.uploads.ObjectNotWritten: cannot write s3://lake/{KEY}: {DENIED}"
    error = spark_error(f"botocore.exceptions.ClientError: {DENIED}", refused)

    assert worker_error(str(error)) == refused
    assert explain(error, TOPIC, "lake") == (
        f"Exception: a task of the plan's Spark job failed: {refused} (the archiver's job role needs s3:GetObject "
        f"and s3:PutObject on s3://lake/{TOPIC.prefix.data_prefix()}*, s3://lake/{TOPIC.prefix.quarantine_prefix()}*, "
        f"s3://lake/{TOPIC.prefix.state_prefix()}*: check its policy (ArchiverJobRole), permission boundaries, SCPs "
        "and the bucket policy)"
    )


def test_a_denial_by_the_lake_key_says_so_and_offsets_like_403_are_no_denial() -> None:
    by_kms = client_error("AccessDenied", "User: arn:aws:sts::1:assumed-role/r/x is not authorized: kms:Encrypt")
    assert "S3 could not use the lake key to write s3://lake/data/" in explain(by_kms, TOPIC, "lake")
    assert "kms:GenerateDataKey and kms:Decrypt on the bucket's KMS key" in explain(by_kms, TOPIC, "lake")
    throttled = spark_error(f"ObjectNotWritten: cannot write s3://lake/{KEY}: An error occurred (SlowDown) ...")
    assert "job role" not in explain(throttled, TOPIC, "lake")
    assert worker_error("RuntimeError: no traceback here") is None


def test_a_long_error_is_cut_but_keeps_the_fix() -> None:
    denied = client_error("AccessDenied", "x" * 2000)
    error = explain(denied, TOPIC, "lake")
    assert f" … [{len(str(denied)) - MAX_ERROR_CHARS} more characters] (the archiver's job role needs" in error
    assert error.endswith("and the bucket policy)")


def test_retries_are_counted_per_client_also_for_calls_that_fail_in_the_end() -> None:
    with mock_aws():
        s3: Any = boto3.client("s3", region_name="eu-west-1", config=RETRIES)
        s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        retries = RetryCount(s3)
        s3.meta.events.register_first("before-send.s3.PutObject", s3_answers((503, "SlowDown"), (500, "Internal")))
        s3.put_object(Bucket="lake", Key="a", Body=b"a")
        assert retries.total == 2
        s3.meta.events.register_first("before-send.s3.PutObject", s3_answers((503, "SlowDown"), (403, "AccessDenied")))
        with pytest.raises(ClientError, match=r"\(AccessDenied\)"):
            s3.put_object(Bucket="lake", Key="b", Body=b"b")
        assert retries.total == 3


def test_topics_sharing_a_client_each_count_the_retries_of_their_own_calls() -> None:
    with mock_aws():
        s3: Any = boto3.client("s3", region_name="eu-west-1", config=RETRIES)
        s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        mine, theirs, whole = ClientShare(s3), ClientShare(s3), RetryCount(s3)
        s3.meta.events.register_first("before-send.s3.PutObject", s3_answers((503, "SlowDown"), (500, "Internal")))
        mine.put_object(Bucket="lake", Key="a", Body=b"a")
        s3.meta.events.register_first("before-send.s3.PutObject", s3_answers((503, "SlowDown"), (403, "AccessDenied")))
        with pytest.raises(theirs.exceptions.ClientError, match=r"\(AccessDenied\)"):
            theirs.put_object(Bucket="lake", Key="b", Body=b"b")
        theirs.put_object(Bucket="lake", Key="c", Body=b"c")
        assert (mine.retries.total, theirs.retries.total, whole.total) == (2, 1, 3)
        assert mine.meta is s3.meta and mine.get_object(Bucket="lake", Key="c")["Body"].read() == b"c"


PERSONAL = dataclasses.replace(TOPIC, spec=TOPIC.spec.model_copy(update={"pii": {"id": PiiAction.HMAC}}))
MASKED = dataclasses.replace(TOPIC, spec=TOPIC.spec.model_copy(update={"pii": {"id": PiiAction.MASK_LAST4}}))
ENDPOINTS = Endpoints("kafka:9092", "http://registry:8081", "eu-west-1", "lake", pseudonym_secret_arn="kafkalake/key")


def test_the_key_is_read_only_when_a_topic_hashes_and_only_the_topics_that_hash_fail_without_it() -> None:
    with mock_aws():
        assert read_pseudonym_key(ENDPOINTS, [TOPIC, MASKED]) is None
        missing = read_pseudonym_key(ENDPOINTS, [TOPIC, PERSONAL])
        assert isinstance(missing, KeyInvalid) and "(ResourceNotFoundException)" in str(missing)
        assert topic_key(missing, TOPIC) is None and topic_key(missing, MASKED) is None
        with pytest.raises(
            KeyInvalid,
            match=r"hashes personal fields or its erasure requests' keys, so nothing was archived: cannot read the",
        ):
            topic_key(missing, PERSONAL)
        secrets = boto3.client("secretsmanager", region_name="eu-west-1")
        secrets.create_secret(Name="kafkalake/key", SecretString=PseudonymKey.secret_string("k1", b"s" * 32))
        assert read_pseudonym_key(ENDPOINTS, [PERSONAL]) == Keyring(PseudonymKey("k1", b"s" * 32))
        secrets.put_secret_value(SecretId="kafkalake/key", SecretString=PseudonymKey.secret_string("k2", b"t" * 32))
        rotated = Keyring(PseudonymKey("k2", b"t" * 32), (PseudonymKey("k1", b"s" * 32),))
        assert read_pseudonym_key(ENDPOINTS, [PERSONAL]) == rotated, "tombstones are digested under both keys"
    unset = read_pseudonym_key(dataclasses.replace(ENDPOINTS, pseudonym_secret_arn=None), [PERSONAL])
    assert isinstance(unset, KeyInvalid) and "set pseudonym_secret_arn" in str(unset)


def test_the_run_makes_the_imports_of_mapinarrow_before_its_first_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass's ``mapInArrow`` checks pandas' and pyarrow's versions on the driver (importing pandas and
    setuptools): the run makes those checks in the background from its start, not when its first pass is built
    (``job.preload_arrow_imports``)."""
    started: list[str] = []
    monkeypatch.setattr(job, "preload_arrow_imports", lambda: started.append("preload"))
    endpoints = Endpoints("127.0.0.1:1", "http://127.0.0.1:2", "eu-west-1", "lake")
    spark = cast(SparkSession, object())  # no topic: no Spark job
    assert job.archive_fleet(spark, endpoints, [], concurrency=1, deadline=0.0, run=Run("r"), say=print) == []
    assert started == ["preload"]
    monkeypatch.undo()
    checked: list[str] = []
    for name in ("require_minimum_pandas_version", "require_minimum_pyarrow_version"):
        monkeypatch.setattr(pandas_utils, name, functools.partial(checked.append, name))
    job.preload_arrow_imports().join()
    assert checked == ["require_minimum_pandas_version", "require_minimum_pyarrow_version"]


def test_the_topics_requests_go_request_threads_at_a_time_whatever_the_heavy_topics_concurrency(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening a topic (its lease, its first plan) waits on S3 and Kafka: a run opens ``request_threads`` topics at
    once, not ``concurrency`` (the heavy topics' Spark jobs), through an S3 client with a connection per thread."""
    threads = 6
    together = threading.Barrier(threads, timeout=10)  # broken unless all six are opened at the same time
    connections: list[int] = []

    def opened(fleet: job.FleetRun, topic: Topic) -> None:
        connections.append(fleet.s3.meta.config.max_pool_connections)
        together.wait()
        fleet.failed(topic, RuntimeError("opened"), 0.0)

    monkeypatch.setattr(job, "preload_arrow_imports", lambda: None)
    monkeypatch.setattr(job.FleetRun, "opened", opened)
    topics = [
        dataclasses.replace(TOPIC, spec=TOPIC.spec.model_copy(update={"kafka_topic": f"t{i}"})) for i in range(threads)
    ]
    spark = cast(SparkSession, object())  # no plan: no Spark job
    results = job.archive_fleet(
        spark, ENDPOINTS, topics, concurrency=1, deadline=0.0, run=Run("r"), say=print, request_threads=threads
    )
    assert [r.error for r in results] == ["RuntimeError: opened"] * threads
    assert connections == [threads] * threads
