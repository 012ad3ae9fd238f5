import contextlib
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake_dev.local import principals, stack
from kafkalake_dev.local.call_recording import CONTROL_PATH, KEYS_SUFFIX
from kafkalake_dev.local.endpoints import local_credentials, local_endpoints
from kafkalake_dev.local.provision import ensure_restricted_key

UNIT_TESTS = Path(__file__).parent / "unit"
SPARK_FIXTURES = frozenset({"spark", "bare_spark"})
STARTED_BY_CONTROLLER = pytest.StashKey[list[str]]()


LONGEST_FIRST = (
    "e2e/test_end_to_end.py",
    "integration/test_compactor.py",
    "integration/test_fleet.py",
    "integration/test_erasure.py",
    "e2e/test_readers.py",
    "integration/test_archiver.py",
    "integration/test_faults.py",
    "integration/test_overlap.py",
    "integration/test_maintainer.py",
    "integration/test_job_environment.py",
    "e2e/test_onboarding_latency.py",
    "integration/test_personal_data.py",
    "integration/test_erasure_index.py",
)
"""The files whose tests take longest in all (``make test`` prints the slowest tests), handed to the workers first so
that no long file is left running alone at the end; the rest keep their order. A hint: a file missing here is only
scheduled later."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a Spark session is marked ``spark`` (``make test-fast`` leaves those out); a module that
    starts Spark some other way (spark-submit, the CLI's jobs) is marked by hand. The longest files go first."""
    for item in items:
        if SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spark)

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0].removeprefix("tests/")
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a file, and among the others, the order is pytest's


def _xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``pytest -n`` the controller starts the local stack once, before the workers (which then find it
    running and leave it alone), unless only unit tests were asked for; it stops what it started at the end."""
    config = session.config
    if _xdist_controller(config) and not all(Path(a).resolve().is_relative_to(UNIT_TESTS) for a in config.args):
        config.stash[STARTED_BY_CONTROLLER] = stack.up()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput") and CALL_LOG in os.environ:
        with contextlib.suppress(OSError):  # the stack is not running: nothing was recorded
            record_calls(None)
            write_local_keys(Path(os.environ[CALL_LOG]).resolve())
    started = session.config.stash.get(STARTED_BY_CONTROLLER, [])
    if started:
        stack.down(started)


CALL_LOG = "KAFKALAKE_CALL_LOG"
"""Set (``make test`` sets it): the file the local endpoint appends the pipeline principals' calls to while the tests
run, for the permission check (``kafkalake_dev.checks.permissions``)."""


def write_local_keys(path: Path) -> None:
    """Beside the recording, the local restricted key: the mapping tells its objects from the lake key's by it."""
    with local_credentials():
        arn = ensure_restricted_key(make_client(local_endpoints(), "kms"))
    Path(f"{path}{KEYS_SUFFIX}").write_text(json.dumps({"restricted": [arn, arn.rsplit("/", 1)[1]]}))


def record_calls(path: Path | None) -> None:
    """The local endpoint records the principals' calls to ``path`` from now on (None: stops recording)."""
    url = f"{local_endpoints().aws_endpoint_url}{CONTROL_PATH}"
    data, method = (str(path).encode(), "POST") if path else (None, "DELETE")
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=10) as answer:
        answer.read()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The seconds each tier's tests took (set-up, call and tear-down, summed over the workers): what a change to
    the suite's speed is measured by, per tier."""
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                parts = Path(report.nodeid.split("::")[0]).parts
                tier = parts[1] if len(parts) > 2 else parts[0]
                seconds[tier] = seconds.get(tier, 0.0) + report.duration
    if seconds:
        tiers = ", ".join(f"{tier} {total:.0f} s" for tier, total in sorted(seconds.items()))
        terminalreporter.write_line(f"test seconds per tier (summed over workers): {tiers}")


@pytest.fixture(scope="session")
def local_stack() -> Iterator[Endpoints]:
    """The real local stack (Kafka, registry, moto server); started if needed, stopped if this session started it.
    moto's credentials are in the process environment for the session (boto3, Spark's JVM and workers)."""
    with stack.running(), local_credentials():
        principals.install()
        if CALL_LOG in os.environ:
            record_calls(Path(os.environ[CALL_LOG]).resolve())
        yield local_endpoints()


@pytest.fixture(scope="session")
def spark(local_stack: Endpoints) -> Iterator[SparkSession]:
    """Local Spark with the connector jars and S3A on the local stack, its JVM started as the archiver job's (C1
    alone: ``kafkalake.jobspec.JVM_OPTIONS``) whatever job a test runs in it: the tests run many short Spark jobs.
    The compactor's and the erasure job's integration tests took 193 s so (one run), against 237 and 213 s with
    Java's defaults and 202 and 188 s with every JVM of theirs on C1, the crash tests' job runs included (two
    alternated runs). How a JVM compiles changes no result."""
    from kafkalake.jobspec import Job
    from kafkalake_dev.local.spark import principal_session

    session = principal_session(local_stack, "kafkalake-tests", Job.ARCHIVE)
    yield session
    session.stop()
