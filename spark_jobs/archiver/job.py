"""The archiver job: every topic of an environment (or those named) in one Spark application, several at once (the
light topics' plans together, one Spark job per round: ``spark_jobs.archiver.light``), each caught up to the high
watermark it saw at the start, each isolated from the others.

A topic that fails commits nothing of the failing plan and is reported with what failed and how to fix it; the
others go on; the run exits non-zero at the end when any topic failed. Per topic one JSON line goes to the job's
log, and the run's metrics go to CloudWatch (``spark_jobs.archiver.metrics``), with, for a scheduled run of every
topic, the catalog's drift from the cluster (``kafkalake.drift``). One topic's way through the run is
``spark_jobs.archiver.topic_run``. The environment's pseudonym keys are read once, at the start, when some topic
hashes personal fields or its tombstones' keys (``kafkalake.personal``): the current one hashes everything new, and
a ``by_key`` topic's tombstones are digested under it and the previous one the secret keeps (rows archived before a
rotation hold the previous key's digests); a topic that needs them fails when they cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from confluent_kafka import KafkaException
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.convention import DEFAULT_TOPIC_NAMING
from kafkalake.drift import compare, observe
from kafkalake.drift import metric_data as drift_metric_data
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import ARCHIVER_BUDGET_MINUTES, ARCHIVER_CONCURRENCY, ARCHIVER_REQUEST_THREADS
from kafkalake.kafka_access import MSK_IAM, kafka_access
from kafkalake.personal import KeyInvalid, Keyring, load_keys
from kafkalake.registry import RegistryError
from kafkalake.topic_catalog import Topic, TopicCatalog, load_topic_catalog
from spark_jobs.archiver.light import LightBatches, is_light
from spark_jobs.archiver.metrics import metric_data, publish
from spark_jobs.archiver.offsets import OffsetClients
from spark_jobs.archiver.summary import TopicResult
from spark_jobs.archiver.topic_run import Started, TopicArchiver, TopicRun, run_access
from spark_jobs.common import Run, add_lease_argument, job_session

MAX_ERROR_CHARS = 800
DENIED_CODE = r"(KMS\.)?AccessDenied(Exception)?|403"
"""S3's error code for a request the job role may not make (KMS's, when S3 passes on the lake key's denial)."""
DENIED = re.compile(rf"\(({DENIED_CODE})\) when calling")
"""The same code in a ClientError's text, as a Spark task's traceback ends with it."""
BY_KMS = re.compile(r"kms:|KMS\.|\bKMS key\b")
"""A denial S3 passed on from KMS: the role may write the objects but not use the bucket's key."""
TRACEBACK = "Traceback (most recent call last):"


def worker_error(text: str) -> str | None:
    """The exception a Spark task's Python worker raised, from the text of the Spark error that wraps it: the first
    line after the frames of the last traceback (the driver sees only text); None when the text holds none."""
    _, found, rest = text.rpartition(TRACEBACK)
    lines = [line for line in rest.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    return lines[0].strip() if found and lines else None


def denial_hint(text: str, topic: Topic, bucket: str) -> str:
    """How to fix an access denial of the topic's objects: the S3 permissions, or the lake key's."""
    prefixes = (topic.prefix.data_prefix(), topic.quarantine_prefix(), topic.prefix.state_prefix())
    where = ", ".join(f"s3://{bucket}/{p}*" for p in prefixes)
    if BY_KMS.search(text):
        return (
            f" (S3 could not use the lake key to write {where}: the archiver's job role needs kms:GenerateDataKey "
            "and kms:Decrypt on the bucket's KMS key, in its policy (ArchiverJobRole) and in the key policy)"
        )
    return (
        f" (the archiver's job role needs s3:GetObject and s3:PutObject on {where}: check its policy "
        "(ArchiverJobRole), permission boundaries, SCPs and the bucket policy)"
    )


def explain(exc: BaseException, topic: Topic, bucket: str) -> str:
    """What failed, for the topic, with how to fix it when the failure says; bounded in length. A failure in a
    Spark task is told by the exception the task raised, not by the Spark error's frames."""
    text = str(exc).strip() or type(exc).__name__
    raised = worker_error(text)
    if raised is not None:
        text = f"a task of the plan's Spark job failed: {raised}"
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + f" … [{len(text) - MAX_ERROR_CHARS} more characters]"
    code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
    if re.fullmatch(DENIED_CODE, code) or (raised is not None and DENIED.search(raised)):
        text += denial_hint(text, topic, bucket)
    return f"{type(exc).__name__}: {text}"


def archive_fleet(
    spark: SparkSession,
    endpoints: Endpoints,
    topics: list[Topic],
    *,
    concurrency: int,
    deadline: float,
    run: Run | None = None,
    pseudonym_key: Keyring | KeyInvalid | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
    request_threads: int = ARCHIVER_REQUEST_THREADS,
) -> list[TopicResult]:
    """Every topic as one run in one Spark application: each takes its lease and starts its first plan,
    ``request_threads`` at a time; a topic with a heavy plan carries its plans out alone (in its own FAIR pool),
    ``concurrency`` such topics at a time, the light ones share a Spark job per round (``spark_jobs.archiver.light``,
    their requests ``request_threads`` at a time). ``pseudonym_key`` is what ``read_pseudonym_key`` found: a topic
    that hashes fields fails without a key."""
    preload_arrow_imports()
    this_run = run or Run.new(spark)
    ttl = this_run.lease_ttl.total_seconds()
    say(f"archiver run {this_run.run_id} (a topic's lease is stale {ttl:.0f} s after its holder stops renewing it)")
    fleet = FleetRun(
        spark,
        endpoints,
        this_run,
        deadline=deadline,
        pseudonym_key=pseudonym_key,
        now=now,
        say=say,
        connections=request_threads,
    )
    with (
        ThreadPoolExecutor(max_workers=max(1, request_threads), thread_name_prefix="requests") as requests,
        ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="heavy") as heavy,
    ):
        light, alone = [], []
        for found in requests.map(fleet.opened, topics):
            if found is not None and is_light(found[1]):
                light.append(found)
            elif found is not None:
                alone.append(heavy.submit(fleet.alone, *found))

        def handed_over(topic_run: TopicRun, started: Started) -> None:
            alone.append(heavy.submit(fleet.alone, topic_run, started))

        try:
            batches = LightBatches(spark, request_threads=request_threads, ended=fleet.ended, alone=handed_over)
            batches.catch_up(light)
            for future in alone:
                future.result()
        finally:
            fleet.close()
    return [fleet.results[t.kafka_topic] for t in topics]


def preload_arrow_imports() -> threading.Thread:
    """Make the driver's imports of a pass's ``mapInArrow`` in the background, from the start of the run: pyspark
    checks pandas' and pyarrow's versions there, importing pandas and (through ``distutils``) setuptools, and making
    them in the first pass held up its Spark job (measured: pandas 1.7 s of the first plan's 4.3 s of driver work
    before its Spark job, setuptools 0.15 s of its 1.2 s of building the pass). Meanwhile the run takes its leases and
    reads Kafka and the registry, mostly waiting on the network. A pass that comes first waits for the imports as it
    would have made them."""
    thread = threading.Thread(target=_arrow_imports, name="preload-arrow-imports", daemon=True)
    thread.start()
    return thread


def _arrow_imports() -> None:
    from pyspark.sql.pandas.utils import require_minimum_pandas_version, require_minimum_pyarrow_version

    require_minimum_pandas_version()
    require_minimum_pyarrow_version()


class FleetRun:
    """The topics of one run, each isolated: what failed is reported with how to fix it, and the others go on."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        run: Run,
        *,
        deadline: float,
        pseudonym_key: Keyring | KeyInvalid | None,
        now: Callable[[], datetime],
        say: Callable[[str], None],
        connections: int,
    ) -> None:
        self.spark, self.endpoints, self.run, self.deadline = spark, endpoints, run, deadline
        self.pseudonym_key, self.now, self.say = pseudonym_key, now, say
        self.results: dict[str, TopicResult] = {}
        """By Kafka topic."""
        self._clients: OffsetClients | None = None
        self._clients_lock = threading.Lock()
        self.s3 = make_client(endpoints, "s3", connections=connections)
        """The S3 client the run's topics share, each with its own count of retries (``kafkalake.aws.ClientShare``),
        with a connection for each of the run's request threads."""

    def clients(self) -> OffsetClients:
        """The run's Kafka and registry access and its offset clients, made once (a topic fails alone with the
        reason they cannot be made); closed by ``close``."""
        with self._clients_lock:
            if self._clients is None:
                self._clients = OffsetClients(run_access(self.endpoints))
            return self._clients

    def close(self) -> None:
        if self._clients is not None:
            self._clients.close()

    def opened(self, topic: Topic) -> tuple[TopicRun, Started] | None:
        """The topic's lease taken and its first plan started; None when it is skipped or failed (``results``)."""
        try:
            keys = topic_key(self.pseudonym_key, topic)
            archiver = TopicArchiver(
                self.spark,
                self.endpoints,
                topic,
                keys=keys,
                clients=self.clients(),
                s3=self.s3,
                now=self.now,
                say=self.say,
            )
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops the others: reported
            self.failed(topic, exc, 0.0)
            return None
        topic_run = TopicRun(archiver, self.deadline)
        try:
            started = topic_run.next_plan() if topic_run.open(self.run) else None
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops the others: reported
            self.ended(topic_run, exc)
            return None
        if started is None:
            self.ended(topic_run, None)
            return None
        return topic_run, started

    def alone(self, topic_run: TopicRun, started: Started) -> None:
        """The topic's plans carried out alone, in its own FAIR pool, from ``started`` on."""
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", topic_run.archiver.topic.name)
        try:
            topic_run.carry_on(started)
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops the others: reported
            self.ended(topic_run, exc)
            return
        self.ended(topic_run, None)

    def ended(self, topic_run: TopicRun, exc: Exception | None) -> None:
        """The topic is done: its lease released, its result kept; failed with ``exc`` when it is not None."""
        try:
            topic_run.close(failed=exc is not None)
        except Exception as closing:  # noqa: BLE001 - reported as the topic's failure
            exc = exc or closing
        if exc is None:
            self.results[topic_run.result.kafka_topic] = topic_run.result
        else:
            self.failed(topic_run.archiver.topic, exc, topic_run.result.seconds)

    def failed(self, topic: Topic, exc: BaseException, seconds: float) -> None:
        error = explain(exc, topic, self.endpoints.bucket)
        self.say(f"{topic.kafka_topic}: FAILED, nothing of the failing plan committed: {error}")
        self.results[topic.kafka_topic] = TopicResult(topic.name, topic.kafka_topic, seconds=seconds, error=error)


def archive(
    spark: SparkSession,
    endpoints: Endpoints,
    topics: list[Topic],
    *,
    concurrency: int,
    budget_minutes: float,
    lease_ttl: timedelta | None = None,
    say: Callable[[str], None] = print,
) -> list[TopicResult]:
    """One run of the job over ``topics`` (``main``, and ``kafkalake archive`` on local Spark): no new plan starts
    ``budget_minutes`` from now, the run's leases live ``lease_ttl`` (the default when None) past its last renewal,
    and the pseudonym key is read once."""
    deadline = time.monotonic() + budget_minutes * 60
    run = Run.new(spark, lease_ttl)
    key = read_pseudonym_key(endpoints, topics)
    return archive_fleet(
        spark, endpoints, topics, concurrency=concurrency, deadline=deadline, run=run, pseudonym_key=key, say=say
    )


def read_pseudonym_key(endpoints: Endpoints, topics: list[Topic]) -> Keyring | KeyInvalid | None:
    """The environment's pseudonym keys (the current one, and the previous one the secret keeps), read once at the
    start when some topic needs them (``Topic.needs_key``; None when none does), or why they could not be read: the
    topics that need them fail with that reason, the others go on."""
    if not any(t.needs_key for t in topics):
        return None
    secret = endpoints.pseudonym_secret_arn
    try:
        return load_keys(make_client(endpoints, "secretsmanager"), secret)
    except KeyInvalid as exc:
        return exc
    except (ClientError, BotoCoreError) as exc:
        code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else type(exc).__name__
        return KeyInvalid(
            f"cannot read the pseudonym key's secret {secret} ({code}): the archiver's job role needs "
            "secretsmanager:GetSecretValue on it (and kms:Decrypt on its key), and the secret must exist"
        )


def topic_key(read: Keyring | KeyInvalid | None, topic: Topic) -> Keyring | None:
    """The keys for ``topic``'s pseudonyms; raise the reason they could not be read when the topic needs them."""
    if isinstance(read, KeyInvalid):
        if topic.needs_key:
            raise KeyInvalid(
                f"{topic.kafka_topic} hashes personal fields or its erasure requests' keys, so nothing was archived: "
                f"{read}"
            )
        return None
    return read


def resolve(catalog: TopicCatalog, env: str, names: list[str]) -> tuple[list[Topic], list[TopicResult]]:
    """The named topics (all of the environment's when none are named), and a failed result per unknown name."""
    if not names:
        return catalog.for_env(env), []
    topics, unknown = [], []
    for name in names:
        try:
            topics.append(catalog.get(name, env))
        except KeyError as exc:
            unknown.append(TopicResult(name, name, error=f"KeyError: {exc.args[0]}; add the topic to the catalog"))
    return topics, unknown


def drift_metrics(
    endpoints: Endpoints, catalog: TopicCatalog, env: str, convention: str, now: datetime
) -> list[dict[str, Any]]:
    """The catalog's drift from the cluster as metrics; none (and a warning) when the cluster cannot be read: the
    archive itself does not depend on it."""
    secrets = make_client(endpoints, "secretsmanager") if endpoints.kafka_secret_arn else None
    try:
        view = observe(kafka_access(endpoints, secrets), catalog.topics)
    except (RegistryError, KafkaException) as exc:
        print(f"warning: catalog drift not measured: {exc}", file=sys.stderr, flush=True)
        return []
    return drift_metric_data(compare(view, catalog.topics, env, convention), now)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="archiver", description="Archive Kafka topics to S3 Parquet, exactly once.")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    parser.add_argument("--topic", action="append", default=[], help="topic name or Kafka topic (default: all)")
    parser.add_argument(
        "--concurrency", type=int, default=ARCHIVER_CONCURRENCY, help="heavy topics carried out at once"
    )
    parser.add_argument(
        "--budget-minutes", type=float, default=ARCHIVER_BUDGET_MINUTES, help="no new plan starts after this"
    )
    parser.add_argument(
        "--topic-naming", default=DEFAULT_TOPIC_NAMING, help="the environment's naming convention (drift)"
    )
    add_lease_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py archive --env staging --catalog catalog [--topic card-authorized ...]`` (EMR Serverless)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    catalog = load_topic_catalog(args.catalog)
    topics, unknown = resolve(catalog, args.env, args.topic)
    spark = job_session("kafkalake-archiver")
    lease_ttl = timedelta(seconds=args.lease_ttl_seconds)
    archived = archive(
        spark, endpoints, topics, concurrency=args.concurrency, budget_minutes=args.budget_minutes, lease_ttl=lease_ttl
    )
    results = [*unknown, *archived]
    for result in results:
        print(json.dumps(result.as_dict()), flush=True)
    now = datetime.now(UTC)
    data = metric_data(results, args.env, now)
    if not args.topic and endpoints.kafka_auth == MSK_IAM:
        print(
            "note: catalog drift not measured: with MSK IAM the archiver's role may describe its catalog topics only "
            "(docs/deploying.md); run `kafkalake catalog drift` as a role that may describe the cluster's topics",
            file=sys.stderr,
            flush=True,
        )
    elif not args.topic:
        data += drift_metrics(endpoints, catalog, args.env, args.topic_naming, now)
    try:
        publish(make_client(endpoints, "cloudwatch"), data)
    except ClientError as exc:
        print(json.dumps({"warning": f"metrics not published: {exc}"}), flush=True)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"{len(failed)} of {len(results)} topics failed: {', '.join(failed)}", file=sys.stderr)
        raise SystemExit(1)
