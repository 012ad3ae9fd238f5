"""Build the deployment packages in plain Python: no Docker, no network, deterministic contents.

What comes from the internet (the connector and S3A jars from Maven Central, the jobs' wheels from PyPI) is
downloaded by one explicit step, ``fetch`` (``make fetch``, ``python -m infra.fetch``; ``kafkalake stack up`` runs it
too), into the cache outside the clone. Synth and local Spark only read the cache, and say which command fills it
when something is missing.
"""

from __future__ import annotations

import compileall
import functools
import gzip
import hashlib
import inspect
import io
import json
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from infra.repo import REPO_ROOT, cache_dir
from kafkalake.jobspec import HADOOP_VERSION, ICEBERG_VERSION, SPARK_CONNECTORS, SPARK_VERSION
from kafkalake.lambda_env import TABLES_FILE
from kafkalake.topic_catalog import Topic, tables_document

LAMBDA_PACKAGES = ("kafkalake", "lambdas")
JOB_PACKAGES = ("kafkalake", "spark_jobs")
JOB_REQUIREMENTS = (
    "pyarrow",
    "pandas",
    "numpy",
    "boto3",
    "botocore",
    "pydantic",
    "PyYAML",
    "fastavro",
    "grpcio-tools",
    "grpcio",
    "protobuf",
    "fastjsonschema",
    "confluent-kafka",
    "aws-msk-iam-sasl-signer-python",
    "httpx",
    "pyiceberg",
    "pyiceberg-core",
)
"""What the jobs import beyond PySpark, pinned as in requirements.txt (one list of versions)."""
EMR_PYTHON = "/usr/bin/python3.11"
"""emr-7.1 and later ship Python 3.11 beside the default 3.9; the jobs need 3.11."""
EMR_PYTHON_TAG = "cpython-311"
"""EMR_PYTHON's bytecode tag (``sys.implementation.cache_tag``): the bytecode the job archives carry is for it."""
EMR_WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
"""The EMR Serverless application is x86_64 on Amazon Linux 2023 (glibc 2.34): wheels for glibc <= 2.28."""


PLATFORM_JARS = (f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}", "com.amazonaws:aws-java-sdk-bundle:1.12.262")
"""S3 support for local Spark: on EMR Serverless the platform provides it, so these are never shipped."""
ICEBERG_JARS = (
    f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_VERSION}",
)
"""Iceberg for local Spark, with the AWS SDK v2 its Glue catalog and S3 client use: on EMR Serverless the platform
provides it too (``kafkalake.jobspec.EMR_ICEBERG_JAR``), so these are never shipped either."""


def maven(*args: str) -> None:
    """Run Maven quietly with its local repository in the cache."""
    subprocess.run(["mvn", "-B", "-q", f"-Dmaven.repo.local={cache_dir() / 'm2'}", *args], check=True)


class MissingDownload(FileNotFoundError):
    """A download synth or local Spark reads from the cache is not there yet."""


def missing(what: str, where: Path) -> MissingDownload:
    return MissingDownload(
        f"not found: {what} (expected in {where}); run `make fetch` (or `python -m infra.fetch`), which "
        "downloads it once into the cache ($KAFKALAKE_CACHE, by default ~/.cache/kafkalake)"
    )


def cached_folder(folder: Path, fill: Callable[[Path], None]) -> Path:
    """``folder``, filled once by ``fill`` and marked complete (an interrupted download is redone)."""
    marker = folder / ".complete"
    if not marker.exists():
        folder.mkdir(parents=True, exist_ok=True)
        fill(folder)
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return folder


JAR_SETS = {"connector-jars": SPARK_CONNECTORS, "platform-jars": PLATFORM_JARS, "iceberg-jars": ICEBERG_JARS}


def _jar_folder(name: str) -> Path:
    """A jar set's folder, named by its coordinates too: a set that gains a jar is fetched again, not read stale."""
    coordinates = hashlib.sha256("\n".join(JAR_SETS[name]).encode()).hexdigest()[:8]
    return cache_dir() / f"{name}-{SPARK_VERSION}-{coordinates}"


def _maven_copy(coordinates: tuple[str, ...], folder: Path) -> None:
    for coordinate in coordinates:
        print(f"[assets] downloading {coordinate} into {folder}", flush=True)
        maven("dependency:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={folder}")


def fetch_jars() -> None:
    """Resolve every jar set from Maven Central once into the cache."""
    for name, coordinates in JAR_SETS.items():
        cached_folder(_jar_folder(name), functools.partial(_maven_copy, coordinates))


def _jars(name: str) -> list[Path]:
    """A jar set from the cache (``fetch_jars`` fills it)."""
    folder = _jar_folder(name)
    if not (folder / ".complete").exists():
        raise missing(f"the {name.replace('-', ' ')} for Spark {SPARK_VERSION}", folder)
    return sorted(folder.glob("*.jar"))


JOBS_JAVA_SOURCES = (
    REPO_ROOT / "infra" / "java" / "KeyedHash.java",
    REPO_ROOT / "infra" / "java" / "ProtobufDecoder.java",
)
"""The jobs' own JVM functions: the keyed hash (``spark_jobs.keyed_hash`` says why it is Java) and the Protobuf
decoder (``spark_jobs.protobuf_decoder`` says why it is ours)."""
JAVA_RELEASE = "17"
"""The Java release the jobs' classes target: EMR Serverless 7.x runs Spark on Java 17."""


def compiled_jar(sources: Path | tuple[Path, ...], folder: str, classpath: list[Path]) -> Path:
    """Java sources compiled together against ``classpath`` and pyspark's own jars, once per content of the sources,
    in the cache under ``folder``: a reproducible jar (``_zip``), so the same sources give the same asset."""
    import pyspark

    files = (sources,) if isinstance(sources, Path) else sources
    digest = hashlib.sha256()
    for source in files:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    jar = cache_dir() / folder / digest.hexdigest()[:16] / f"{files[0].stem}.jar"
    if jar.exists():
        return jar
    full_classpath = [str(Path(pyspark.__file__).parent / "jars" / "*"), *map(str, classpath)]
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as scratch:  # beside the jar: the rename is atomic
        classes, built = Path(scratch) / "classes", Path(scratch) / "built.jar"
        subprocess.run(
            ["javac", "--release", JAVA_RELEASE, "-d", str(classes), "-cp", ":".join(full_classpath), *map(str, files)],
            check=True,
            capture_output=True,
        )
        _zip(classes, built)
        built.replace(jar)
    return jar


def connector_jars() -> list[Path]:
    """What the jobs ship beyond Spark (``spark.jars``): the Kafka and Avro connectors for the pinned Spark, and
    the jobs' own JVM functions, compiled here from their sources (no download at build or run time)."""
    return [*_jars("connector-jars"), compiled_jar(JOBS_JAVA_SOURCES, "jobs-jar", [])]


def platform_jars() -> list[Path]:
    """S3A and Iceberg for local Spark, which EMR Serverless provides itself."""
    return [*_jars("platform-jars"), *_jars("iceberg-jars")]


def spark_jars() -> list[Path]:
    """Everything local Spark needs: the shipped connectors and the platform's S3 support."""
    return [*connector_jars(), *platform_jars()]


def _copy_packages(names: tuple[str, ...], target: Path) -> None:
    for name in names:
        shutil.copytree(
            REPO_ROOT / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tables-*.json")
        )


def maintainer_bundle(out_dir: Path, topics: list[Topic]) -> Path:
    """The Lambdas' code (maintainer and reconciler): the core package, the handlers, and the catalog as
    ``lambdas/tables.json``. Third-party dependencies come from layers (environments.yaml: maintainer_layers)."""
    target = out_dir / "maintainer"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    _copy_packages(LAMBDA_PACKAGES, target)
    (target / "lambdas" / TABLES_FILE).write_text(json.dumps(tables_document(topics), indent=1))
    return target


def _zip(source: Path, archive: Path) -> None:
    """A reproducible zip: sorted entries, fixed timestamps and modes."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(str(path.relative_to(source)), date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zipped.writestr(info, path.read_bytes())


def compiled(folder: Path, *, beside: bool = False) -> None:
    """Bytecode of every module under ``folder`` for EMR_PYTHON, as unchecked hash-based ``.pyc`` (PEP 552): an
    archive's files never change and their times are fixed (``_tar_gz``, ``_zip``), so Python loads the bytecode
    without looking at the source. Without it every Python process of every job run (the driver, Spark's Python
    daemon and each worker) compiled each module it imported from source, pandas and botocore included: measured
    locally, one light topic's archiver run spent 3.4 of its 7.5 CPU seconds after the Spark start in Python
    workers, half of that compiling (py-spy); with bytecode the run took 4.4 CPU seconds instead of 6.9 and 3.1 s
    instead of 4.8 (two alternated pairs, C1 only). ``beside``: ``module.pyc`` next to ``module.py``, where zipimport
    looks (the ``--py-files`` zip), else in ``__pycache__``. The code objects name their modules by their path under
    ``folder``, so the bytes are the same on every machine. Only an interpreter of EMR_PYTHON's version compiles for
    it: another leaves ``folder`` as it is (the jobs then compile as before)."""
    if sys.implementation.cache_tag != EMR_PYTHON_TAG:
        return
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
    if not beside:
        if not compileall.compile_dir(folder, quiet=1, stripdir=str(folder), workers=0, invalidation_mode=unchecked):
            raise RuntimeError(f"some module under {folder} does not compile (compileall lists them)")
        return
    for source in sorted(folder.rglob("*.py")):
        relative = str(source.relative_to(folder))
        py_compile.compile(
            str(source), str(source.with_suffix(".pyc")), relative, doraise=True, invalidation_mode=unchecked
        )


def jobs_bundle(out_dir: Path, catalog: Path = REPO_ROOT / "catalog") -> Path:
    """For EMR Serverless: ``kafkalake_jobs.zip`` (``--py-files``: the core package and the jobs, with their bytecode:
    ``compiled``), ``catalog.zip`` (``spark.archives ...#catalog``: the topic catalog, unpacked beside the driver)
    and the entry point."""
    target = out_dir / "jobs"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    staging = out_dir / "jobs-src"
    shutil.rmtree(staging, ignore_errors=True)
    _copy_packages(JOB_PACKAGES, staging)
    compiled(staging, beside=True)
    _zip(staging, target / "kafkalake_jobs.zip")
    _zip(catalog, target / "catalog.zip")
    shutil.copy(REPO_ROOT / "spark_jobs" / "entrypoint.py", target / "entrypoint.py")
    return target


def job_requirements() -> list[str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?==([^\s#]+)", line)
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    return [pins[name.lower()] for name in JOB_REQUIREMENTS]


LAUNCHER = f"""#!/bin/sh
# EMR Serverless unpacks this archive as ./environment; Spark runs this as PYSPARK_PYTHON.
here="$(cd "$(dirname "$0")/.." && pwd)"
PYTHONPATH="$here/site-packages${{PYTHONPATH:+:$PYTHONPATH}}" exec "${{KAFKALAKE_BASE_PYTHON:-{EMR_PYTHON}}}" "$@"
"""


def _tar_gz(source: Path, archive: Path) -> None:
    """A reproducible tar.gz: sorted entries, fixed owners, times and modes (launchers executable)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(source.rglob("*")):
            info = tar.gettarinfo(str(path), str(path.relative_to(source)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                info.mode = 0o755 if path.parent.name == "bin" else 0o644
                tar.addfile(info, path.open("rb"))
            elif path.is_dir():
                info.mode = 0o755
                tar.addfile(info)
    # zlib's level 6: a quarter of level 9's time on the job environment (~350 MB) for 0.5% more bytes (measured)
    with gzip.GzipFile(archive, "wb", compresslevel=6, mtime=0) as zipped:
        zipped.write(buffer.getvalue())


def _drop_scripts(site_packages: Path) -> None:
    """Console scripts carry the building interpreter's path in their shebang (and their hashes in RECORD), so the
    archive would differ from one machine to the next; the jobs run none of them."""
    shutil.rmtree(site_packages / "bin", ignore_errors=True)
    for record in site_packages.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines(keepends=True)
        record.write_text("".join(line for line in lines if not line.startswith("../")))


def _cached_job_environment() -> Path:
    """Where the environment of the current requirement set is cached (``$KAFKALAKE_CACHE/job-environments``)."""
    steps = [inspect.getsource(step) for step in (_drop_scripts, compiled)]
    recipe = [*job_requirements(), *EMR_WHEEL_PLATFORMS, LAUNCHER, *steps]
    digest = hashlib.sha256("\n".join(recipe).encode()).hexdigest()[:16]
    return cache_dir() / "job-environments" / f"environment-{digest}.tar.gz"


def build_job_environment() -> Path:
    """Build ``environment.tgz`` for EMR Serverless (``--archives ...#environment``, ``PYSPARK_PYTHON=
    ./environment/bin/python``) into the cache unless it is there: the jobs' dependencies as manylinux wheels for
    CPython 3.11 on x86_64, installed with pip's ``--platform`` (no Docker, no build on Amazon Linux), their bytecode
    (``compiled``), and a launcher that runs EMR's Python 3.11 with them. One archive per requirement set."""
    requirements = job_requirements()
    cached = _cached_job_environment()
    if not cached.exists():
        staging = cached.with_suffix(".staging")
        shutil.rmtree(staging, ignore_errors=True)
        print(f"[assets] building the EMR job environment ({len(requirements)} requirements) into {cached}")
        platforms = [arg for platform in EMR_WHEEL_PLATFORMS for arg in ("--platform", platform)]
        # --no-warn-conflicts: pip compares the target's packages with this virtualenv's, where AWS SDK for pandas
        # (installed without its pyarrow pin, see the Makefile) would make it print an ERROR about a different
        # environment than the one it builds
        target = ["--target", str(staging / "site-packages"), "--no-warn-conflicts"]
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", *target]
        wheels = [*platforms, "--python-version", "3.11", "--implementation", "cp", "--only-binary=:all:"]
        subprocess.run([*pip, *wheels, *requirements], check=True)
        _drop_scripts(staging / "site-packages")
        compiled(staging / "site-packages")
        (staging / "bin").mkdir()
        (staging / "bin" / "python").write_text(LAUNCHER)
        _tar_gz(staging, cached.with_suffix(".tmp"))
        cached.with_suffix(".tmp").replace(cached)
        shutil.rmtree(staging)
    return cached


def job_environment(out_dir: Path) -> Path:
    """The jobs' ``environment.tgz`` from the cache (``build_job_environment`` fills it), copied into ``out_dir``."""
    cached = _cached_job_environment()
    if not cached.exists():
        raise missing("the jobs' Python environment for the pinned requirements", cached)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "environment.tgz"  # Spark unpacks archives by extension; the CDK asset keeps only ".tgz"
    shutil.copy(cached, target)
    return target


def fetch() -> None:
    """The one step that downloads: every jar set and the jobs' Python environment, into the cache."""
    fetch_jars()
    build_job_environment()
