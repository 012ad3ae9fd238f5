"""Run a job exactly as EMR Serverless runs its job-run specification, with ``spark-submit`` on this machine.

The specification (``kafkalake.jobspec.JobRun``) is rendered with the locally built assets in place of their S3
URLs: the same entry point, the jobs zip, the catalog and environment archives (unpacked into the working
directory under their ``#alias`` as EMR unpacks them), the connector jars (no Maven resolution at run time), the
``KAFKALAKE_*`` settings and the Python launcher of the environment archive (``./environment/bin/python``). What the
platform provides on EMR the runner provides here: PySpark (from this virtualenv's ``spark-submit``), S3 support
(S3A on the local endpoint), the credentials of the job's role (a principal's key: ``kafkalake_dev.local.principals``)
and a machine time zone that is not UTC.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pyspark

from infra.assets import connector_jars, job_environment, jobs_bundle, platform_jars
from infra.repo import cache_dir
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import CATALOG_DIR, EMR_ICEBERG_JAR, JobArtifacts, JobRun
from kafkalake_dev.local.endpoints import environ_with
from kafkalake_dev.local.principals import principal_credentials
from kafkalake_dev.local.spark import JAVA_OPTIONS, LOCAL_CONF, s3a_conf, scratch_conf, under_platform

MACHINE_TIME_ZONE = "America/New_York"
"""The jobs must not depend on the machine's zone: the local runs use one that is not UTC."""
OFFLINE_JAVA_OPTIONS = (
    "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=9 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=9 "
    "-Dhttp.nonProxyHosts=127.0.0.1|localhost"
)
"""Every HTTP(S) download the JVM tried (Maven/Ivy resolution) would go to a closed port and fail; the local
stack's own addresses (the AWS endpoint) are reached directly."""
DRIVER_ENV = "spark.emr-serverless.driverEnv."


class JobFailed(RuntimeError):
    """The job resolved something at run time (it must not: the jobs run without internet in AWS)."""


@dataclass(frozen=True)
class LocalAssets:
    """The stack's job assets, built here as ``cdk synth`` builds them."""

    artifacts: JobArtifacts

    @classmethod
    def build(cls, folder: Path, catalog: Path) -> LocalAssets:
        """The assets for ``catalog`` (the stack's catalog, or a test's copy of it)."""
        bundle = jobs_bundle(folder / "jobs", catalog)
        environment = job_environment(folder / "environment")
        return cls(
            JobArtifacts(
                entry_point=str(bundle / "entrypoint.py"),
                py_files=str(bundle / "kafkalake_jobs.zip"),
                catalog_archive=str(bundle / "catalog.zip"),
                environment_archive=str(environment),
                jars=tuple(str(p) for p in connector_jars()),
            )
        )


def parse_submit_parameters(parameters: str) -> tuple[list[str], dict[str, str]]:
    """(spark-submit options other than ``--conf``, the ``--conf`` settings) of a rendered specification."""
    words, options, conf = shlex.split(parameters), [], {}
    while words:
        word = words.pop(0)
        if word == "--conf":
            key, _, value = words.pop(0).partition("=")
            conf[key] = value
        else:
            options += [word, words.pop(0)]
    return options, conf


def unpack_archives(archives: str, work: Path) -> None:
    """``path#alias,...`` unpacked into ``work/alias`` (zip or tar.gz, by extension, as Spark does). A tar.gz (the
    job environment, ~350 MB unpacked) is unpacked once per content into the cache and linked in: the launcher
    finds its packages relative to itself, so the job sees the same ``./environment`` either way."""
    for item in filter(None, archives.split(",")):
        path, _, alias = item.partition("#")
        target = work / (alias or Path(path).name)
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                archive.extractall(target)  # noqa: S202 - our own asset, built by infra.assets
        else:
            target.symlink_to(unpacked_once(Path(path)), target_is_directory=True)


def unpacked_once(archive: Path) -> Path:
    """``archive`` (tar.gz) unpacked in the cache under its content's digest; unpacked beside and renamed into
    place, so a run interrupted mid-way or two runs at once never leave a partial folder to the next."""
    digest = hashlib.sha256()
    with archive.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    folder = cache_dir() / "unpacked" / digest.hexdigest()[:16]
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}-", dir=folder.parent))
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        try:
            partial.rename(folder)
        except OSError:  # another run put the same content in place first
            shutil.rmtree(partial)
    return folder


def shipped_jars(jars: str) -> list[str]:
    """The run's ``spark.jars`` without what EMR's platform provides (its Iceberg jar): locally ``platform_jars``
    stands in for it."""
    return [jar for jar in jars.split(",") if jar != EMR_ICEBERG_JAR]


def submit_command(run: JobRun, work: Path, event_log: Path | None = None) -> tuple[list[str], dict[str, str], str]:
    """The spark-submit command line, the driver's environment and the archives (``spark.archives``, which the
    runner unpacks into the working directory ``work`` as EMR does) for ``run``: the specification's options and
    settings, plus what the platform provides on EMR (local master, S3 support, a non-UTC machine zone, an empty
    Ivy home (``work/.ivy``) with downloads pointed at a closed port, and Spark's scratch in ``work/.scratch``), and
    Spark's event log in ``event_log`` when given (EMR Serverless keeps every run's, for its Spark UI)."""
    options, conf = parse_submit_parameters(run.spark_submit_parameters())
    driver_env = {k.removeprefix(DRIVER_ENV): v for k, v in conf.items() if k.startswith(DRIVER_ENV)}
    scratch = scratch_conf(work / ".scratch")
    platform_options = f"-Duser.timezone={MACHINE_TIME_ZONE} {OFFLINE_JAVA_OPTIONS} {scratch.pop(JAVA_OPTIONS)}"
    platform = {
        **LOCAL_CONF,
        **scratch,
        "spark.jars.ivy": str(work / ".ivy"),
        JAVA_OPTIONS: platform_options,
        "spark.jars": ",".join([*shipped_jars(conf["spark.jars"]), *(str(p) for p in platform_jars())]),
        **s3a_conf(run.endpoints, principal_credentials(run.job)["AWS_ACCESS_KEY_ID"]),
        **({"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_log.as_uri()} if event_log else {}),
    }
    settings = {k: v for k, v in under_platform(conf, platform).items() if not k.startswith(DRIVER_ENV)}
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    command = [
        spark_submit,
        *options,
        *(arg for k, v in settings.items() for arg in ("--conf", f"{k}={v}")),
        run.artifacts.entry_point,
        *run.entry_point_arguments(),
    ]
    return command, driver_env, conf["spark.archives"]


@dataclass(frozen=True)
class JobOutcome:
    returncode: int
    lines: list[dict[str, Any]]
    """The JSON lines the job printed (one per topic, or per compacted partition)."""
    stdout: str
    stderr: str
    """Everything the job printed: its own lines, Spark's and the JVM's logs."""

    @property
    def output(self) -> str:
        """The ends of both, to show with a failure."""
        return f"{self.stdout[-4000:]}\n{self.stderr[-4000:]}"


class Submit(Protocol):
    """How a job-run specification is run: ``run_job`` (spark-submit, as EMR runs it) or ``run_in_process``."""

    def __call__(self, run: JobRun, endpoints: Endpoints, *, say: Callable[[str], None] = ...) -> JobOutcome: ...


def run_job(
    run: JobRun, endpoints: Endpoints, *, say: Callable[[str], None] = print, event_log: Path | None = None
) -> JobOutcome:
    """Run ``run`` (rendered with local artifacts) against ``endpoints`` as EMR Serverless would run it; with Spark's
    event log written into the folder ``event_log`` when given."""
    run = replace(run, endpoints=endpoints)
    with tempfile.TemporaryDirectory(prefix="kafkalake-job-") as folder:
        work = Path(folder)
        ivy = work / ".ivy"
        command, driver_env, archives = submit_command(run, work, event_log)
        unpack_archives(archives, work)
        spark_home = str(Path(pyspark.__file__).parent)  # EMR's Spark, here the virtualenv's
        credentials = principal_credentials(run.job)  # the job's role, as EMR runs it
        region = {"AWS_REGION": run.endpoints.region}  # as EMR sets it: the MSK IAM signers read it there
        environ = {
            **os.environ,
            **credentials,
            **region,
            **driver_env,
            "TZ": MACHINE_TIME_ZONE,
            "SPARK_HOME": spark_home,
        }
        arguments = " ".join(run.entry_point_arguments())
        say(f"runner: {run.name}: spark-submit {Path(run.artifacts.entry_point).name} {arguments} (in {work})")
        done = subprocess.run(command, cwd=work, env=environ, capture_output=True, text=True, check=False)
        downloaded = sorted(str(p.relative_to(ivy)) for p in ivy.rglob("*.jar")) if ivy.exists() else []
    if downloaded:
        raise JobFailed(f"{run.name} resolved jars at run time: {downloaded}")
    return JobOutcome(done.returncode, json_lines(done.stdout), done.stdout, done.stderr)


def run_in_process(run: JobRun, endpoints: Endpoints, *, say: Callable[[str], None] = print) -> JobOutcome:
    """Run ``run``'s entry point in this process, on its active Spark session: the specification's arguments and
    catalog archive and its ``KAFKALAKE_*`` settings, without spark-submit's packaging (the environment archive, the
    jobs zip, a JVM of its own). For checks whose subject is what the jobs do, not how they are shipped; the
    end-to-end test runs the specification with ``run_job``. Its stderr is empty: Spark logs to this process's."""
    from spark_jobs.entrypoint import JOBS

    catalog = run.artifacts.catalog_archive
    printed = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="kafkalake-job-") as folder, contextlib.chdir(folder):
        unpack_archives(f"{catalog}#{CATALOG_DIR}", Path(folder))
        say(f"runner: {run.name}: in process {' '.join(run.entry_point_arguments())} (in {folder})")
        with environ_with(endpoints.to_env()), contextlib.redirect_stdout(printed):
            try:
                JOBS[run.job](list(run.arguments))
                returncode = 0
            except SystemExit as exited:
                returncode = exited.code if isinstance(exited.code, int) else 1
    return JobOutcome(returncode, json_lines(printed.getvalue()), printed.getvalue(), "")


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON lines a job printed (one per topic, or per compacted partition), among Spark's other output."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
