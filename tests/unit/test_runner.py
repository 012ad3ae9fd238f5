"""The local runner renders the same job-run specification EMR Serverless runs, offline and in a non-UTC zone."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.repo import environments_file
from kafkalake.environments import load_environments
from kafkalake.job_runs import archiver_run
from kafkalake.jobspec import JVM_OPTIONS, Job, JobArtifacts
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.runner import MACHINE_TIME_ZONE, parse_submit_parameters, submit_command
from kafkalake_dev.local.spark import JAVA_OPTIONS, scratch_conf, session_scratch, under_platform

STAGING = load_environments(environments_file())["staging"]


def test_submit_command_is_the_specification_plus_the_platform(tmp_path: Path) -> None:
    artifacts = JobArtifacts("/a/entrypoint.py", "/a/jobs.zip", "/a/catalog.zip", "/a/env.tgz", ("/a/k.jar",))
    run = archiver_run(STAGING, artifacts)
    options, conf = parse_submit_parameters(run.spark_submit_parameters())
    assert options == ["--py-files", "/a/jobs.zip"]
    assert conf["spark.archives"] == "/a/catalog.zip#catalog,/a/env.tgz#environment"
    local = dataclasses.replace(run, endpoints=local_endpoints(STAGING.bucket))
    command, driver_env, archives = submit_command(local, tmp_path)
    assert archives == conf["spark.archives"]
    rendered = " ".join(command)
    assert command[-len(run.entry_point_arguments()) :] == run.entry_point_arguments()
    assert "spark.jars.packages" not in rendered
    assert f"spark.jars.ivy={tmp_path / '.ivy'}" in rendered and "-Dhttps.proxyPort=9" in rendered
    scratch = tmp_path / ".scratch"  # removed with the run's folder, even when the run was killed
    assert f"spark.local.dir={scratch}" in rendered and f"-Djava.io.tmpdir={scratch}" in rendered
    assert f"-Duser.timezone={MACHINE_TIME_ZONE}" in rendered and MACHINE_TIME_ZONE != "UTC"
    java = next(arg for arg in command if arg.startswith(f"{JAVA_OPTIONS}=")).removeprefix(f"{JAVA_OPTIONS}=")
    assert java.endswith(f" {JVM_OPTIONS[Job.ARCHIVE]}")  # the archiver job's own JVM options, after the platform's
    assert f"spark.executor.extraJavaOptions={JVM_OPTIONS[Job.ARCHIVE]}" in rendered
    assert "spark.sql.session.timeZone=UTC" in rendered  # from the specification, as in AWS
    jars = next(arg for arg in command if arg.startswith("spark.jars=")).removeprefix("spark.jars=").split(",")
    assert jars[0] == "/a/k.jar" and all(Path(j).exists() for j in jars[1:])  # the platform's S3A, from the cache
    assert driver_env["PYSPARK_PYTHON"] == "./environment/bin/python"
    assert driver_env["KAFKALAKE_BUCKET"] == STAGING.bucket
    assert driver_env["KAFKALAKE_AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_a_sessions_scratch_outlives_no_killed_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    root = tmp_path / "spark-scratch"
    killed, running = root / str(ended.pid), root / str(os.getppid())
    for folder in (killed, running):
        (folder / "spark-1" / "userFiles-1").mkdir(parents=True)
    mine = session_scratch()
    assert mine == root / str(os.getpid())
    assert not killed.exists() and (running / "spark-1" / "userFiles-1").is_dir()
    assert scratch_conf(mine) == {"spark.local.dir": str(mine), JAVA_OPTIONS: f"-Djava.io.tmpdir={mine}"}
    assert mine.is_dir()


def test_the_platforms_settings_win_but_jvm_options_are_joined_the_jobs_last() -> None:
    job = {"spark.sql.shuffle.partitions": "8", JAVA_OPTIONS: "-Xjob", "spark.executor.extraJavaOptions": "-Xexec"}
    platform = {"spark.sql.shuffle.partitions": "4", JAVA_OPTIONS: "-Dplatform", "spark.master": "local[2]"}
    assert under_platform(job, platform) == {
        "spark.sql.shuffle.partitions": "4",
        JAVA_OPTIONS: "-Dplatform -Xjob",
        "spark.executor.extraJavaOptions": "-Xexec",
        "spark.master": "local[2]",
    }
