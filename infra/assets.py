"""Build the deployment packages in plain Python: no Docker, no network, deterministic contents."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from kafkalake.catalog import Topic, tables_document
from kafkalake.config import repo_root

LAMBDA_PACKAGES = ("kafkalake", "lambdas")
JOB_PACKAGES = ("kafkalake", "spark_jobs")


def _copy_packages(names: tuple[str, ...], target: Path) -> None:
    for name in names:
        shutil.copytree(
            repo_root() / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tables-*.json")
        )


def maintainer_bundle(out_dir: Path, topics: list[Topic]) -> Path:
    """The Lambda's code: the core package, the handler, and the catalog as ``tables.json`` beside it.
    Third-party dependencies come from layers (environments.yaml: maintainer_layers)."""
    target = out_dir / "maintainer"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    _copy_packages(LAMBDA_PACKAGES, target)
    (target / "lambdas" / "maintainer" / "tables.json").write_text(json.dumps(tables_document(topics), indent=1))
    return target


def _zip(source: Path, archive: Path) -> None:
    """A reproducible zip: sorted entries, fixed timestamps and modes."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(str(path.relative_to(source)), date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zipped.writestr(info, path.read_bytes())


def jobs_bundle(out_dir: Path) -> Path:
    """For EMR Serverless: ``kafkalake_jobs.zip`` (``--py-files``: the core package and the jobs),
    ``catalog.zip`` (``--archives ...#catalog``: the topic catalog, unpacked beside the driver) and the
    entry point."""
    target = out_dir / "jobs"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    staging = out_dir / "jobs-src"
    shutil.rmtree(staging, ignore_errors=True)
    _copy_packages(JOB_PACKAGES, staging)
    _zip(staging, target / "kafkalake_jobs.zip")
    _zip(repo_root() / "catalog", target / "catalog.zip")
    shutil.copy(repo_root() / "spark_jobs" / "entrypoint.py", target / "entrypoint.py")
    return target
