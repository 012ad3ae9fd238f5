"""What ships to AWS is exactly the core and the runtime code: dev tooling is never bundled."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.assets import JOBS_JAVA_SOURCES, compiled_jar, jobs_bundle, maintainer_bundle
from infra.repo import catalog_dir
from kafkalake.topic_catalog import load_topic_catalog

CORE = {
    f"kafkalake/{name}.py"
    for name in (
        "__init__",
        "archive_receipts",
        "aws",
        "convention",
        "drift",
        "endpoints",
        "environments",
        "erasure",
        "footer",
        "glue",
        "iceberg",
        "job_runs",
        "json_schema",
        "jobspec",
        "kafka",
        "kafka_access",
        "lambda_env",
        "layout",
        "lease",
        "lftags",
        "metrics",
        "naming",
        "permissions",
        "personal",
        "protobuf_schema",
        "registered_formats",
        "registry",
        "s3_location",
        "topic_catalog",
        "topic_spec",
        "undeclared",
        "wire",
    )
} | {"kafkalake/proto/confluent/meta.proto"}
"""The core package: what runs in AWS and is shared. A new module here is shipped to AWS: add it on purpose."""
LAMBDA = CORE | {
    "lambdas/__init__.py",
    "lambdas/maintainer/__init__.py",
    "lambdas/maintainer/dal.py",
    "lambdas/maintainer/handler.py",
    "lambdas/maintainer/inference.py",
    "lambdas/maintainer/logic.py",
    "lambdas/maintainer/models.py",
    "lambdas/maintainer/partitions.py",
    "lambdas/maintainer/report.py",
    "lambdas/maintainer/sync.py",
    "lambdas/tables.json",
    "lambdas/tables.py",
    "lambdas/reconciler/__init__.py",
    "lambdas/reconciler/dal.py",
    "lambdas/reconciler/handler.py",
    "lambdas/reconciler/logic.py",
}
JOBS = CORE | {
    f"spark_jobs/{name}.py"
    for name in (
        "__init__",
        "common",
        "entrypoint",
        "keyed_hash",
        "protobuf_decoder",
        "iceberg_maintenance",
        "archiver/__init__",
        "archiver/job",
        "archiver/json_schema_check",
        "archiver/light",
        "archiver/metrics",
        "archiver/offsets",
        "archiver/plan",
        "archiver/pseudonyms",
        "archiver/records",
        "archiver/summary",
        "archiver/table_commit",
        "archiver/task_reader",
        "archiver/topic_run",
        "archiver/transform",
        "archiver/uploads",
        "archiver/upsert",
        "archiver/writer",
        "compaction/__init__",
        "compaction/binning",
        "compaction/clean",
        "compaction/digest",
        "compaction/inputs",
        "compaction/job",
        "compaction/manifest",
        "compaction/merging",
        "compaction/protocol",
        "compaction/selection",
        "compaction/sizing",
        "compaction/swap",
        "compaction/table_maintenance",
        "compaction/verify",
        "compaction/work",
        "compaction/write",
        "erasure/__init__",
        "erasure/batch",
        "erasure/index",
        "erasure/job",
        "erasure/matching",
        "erasure/purge",
        "erasure/subjects",
        "erasure/table_delete",
    )
}


def test_the_lambda_asset_holds_exactly_the_allowlist(tmp_path: Path) -> None:
    bundle = maintainer_bundle(tmp_path, load_topic_catalog(catalog_dir()).for_env("staging"))
    shipped = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()}
    assert shipped == LAMBDA, f"not allowed: {sorted(shipped - LAMBDA)}; missing: {sorted(LAMBDA - shipped)}"


def test_the_jobs_zip_holds_exactly_the_allowlist_with_its_bytecode(tmp_path: Path) -> None:
    bundle = jobs_bundle(tmp_path)
    assert sorted(p.name for p in bundle.iterdir()) == ["catalog.zip", "entrypoint.py", "kafkalake_jobs.zip"]
    with zipfile.ZipFile(bundle / "kafkalake_jobs.zip") as archive:
        shipped = set(archive.namelist())
    allowed = JOBS | {name.removesuffix(".py") + ".pyc" for name in JOBS if name.endswith(".py")}
    assert shipped == allowed, f"not allowed: {sorted(shipped - allowed)}; missing: {sorted(allowed - shipped)}"


def test_the_jobs_zip_modules_load_from_their_bytecode_whatever_the_source_says(tmp_path: Path) -> None:
    """zipimport takes ``module.pyc`` beside ``module.py`` without comparing it with the source (unchecked hash; ``-S``:
    no site, so the zip and not this checkout's editable install holds ``kafkalake``):
    a job's Python never compiles the jobs' modules. Proven with a zip whose one source was changed after
    compiling: the bytecode's value is the one imported, and its code names the module by its path in the zip."""
    bundle = jobs_bundle(tmp_path / "build")
    original = tmp_path / "kafkalake_jobs.zip"
    with zipfile.ZipFile(bundle / "kafkalake_jobs.zip") as archive, zipfile.ZipFile(original, "w") as changed:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "kafkalake/naming.py":
                data += b"\nraise RuntimeError('compiled from source')\n"
            changed.writestr(info, data)
    probe = "import kafkalake.naming as m; print(m.__file__.rsplit('/', 2)[-2:], m.__spec__.loader.__class__.__name__)"
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PYTHONPATH": str(original)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["['kafkalake',", "'naming.pyc']", "zipimporter"]
    with zipfile.ZipFile(bundle / "catalog.zip") as archive:
        assert all(name.endswith((".yaml", ".avsc")) for name in archive.namelist())


def test_the_jobs_jar_holds_the_keyed_hash_and_is_the_same_whichever_cache_built_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jars = []
    for cache in ("one", "two"):
        monkeypatch.setenv("KAFKALAKE_CACHE", str(tmp_path / cache))
        jars.append(compiled_jar(JOBS_JAVA_SOURCES, "jobs-jar", []))
    assert jars[0] != jars[1] and jars[0].read_bytes() == jars[1].read_bytes()
    with zipfile.ZipFile(jars[0]) as archive:
        assert sorted(archive.namelist()) == [
            "kafkalake/jobs/KeyedHash.class",
            "kafkalake/jobs/ProtobufDecoder$1.class",
            "kafkalake/jobs/ProtobufDecoder$Reader.class",
            "kafkalake/jobs/ProtobufDecoder$Value.class",
            "kafkalake/jobs/ProtobufDecoder.class",
        ]
