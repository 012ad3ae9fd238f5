"""What the stacks are built from and what they ship: a catalog of two companies gives one stack its five topics, the
maintainer's asset imports in a fresh virtualenv, the jobs run from their zip with the catalog and environment
archives, and SAM's env file names the maintainer's logical id."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from infra.app import build
from infra.assets import maintainer_bundle
from infra.repo import REPO_ROOT
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog
from tests.unit.cdk_templates import CATALOG, ENVIRONMENTS, resources, template, write_topic


def test_maintainer_asset_imports_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """The bundle plus the layers' packages (Powertools, pydantic, pyarrow; boto3 is in the runtime) is enough."""
    bundle = maintainer_bundle(tmp_path / "build", CATALOG.for_env("staging"))
    assert (bundle / "kafkalake" / "layout.py").exists()
    assert json.loads((bundle / "lambdas" / "tables.json").read_text())[0]["env"] == "staging"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = {
        line.split("==")[0].split("[")[0].lower(): line.strip()
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line
    }
    wanted = [pins[n] for n in ("aws-lambda-powertools", "aws-xray-sdk", "pydantic", "pyarrow", "boto3", "botocore")]
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *wanted], check=True)
    probe = (
        "import sys, lambdas.maintainer.handler as h; "
        "heavy = [m for m in ('yaml', 'fastavro', 'kafkalake.topic_catalog', 'pyspark') if m in sys.modules]; "
        "print(h.handler.__name__, heavy)"
    )
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=bundle,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "AWS_REGION": "eu-west-1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "handler []"


def test_sam_env_file_names_the_maintainer_logical_id(stacks: Any) -> None:
    functions = template(stacks, "staging").find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": "kafkalake-staging-maintainer"}}
    )
    overrides = json.loads((REPO_ROOT / "events" / "sam-env.json").read_text())
    assert list(overrides) == list(functions)
    assert json.loads((REPO_ROOT / "events" / "scheduled.json").read_text())["detail-type"] == "Scheduled Event"


def test_jobs_run_from_their_zip_with_the_catalog_and_environment_archives(tmp_path: Path) -> None:
    """What EMR Serverless does: catalog.zip unpacked as ./catalog, environment.tgz as ./environment, the jobs
    zip on the Python path, ./environment/bin/python as the interpreter (EMR's own Python 3.11, here Debian's,
    which has none of our dependencies), PySpark provided by the platform. Every module the jobs import from the two
    archives loads from the bytecode they carry: none is compiled from source (``infra.assets.compiled``)."""
    import tarfile
    import zipfile

    from infra.assets import EMR_PYTHON, job_environment, jobs_bundle

    bundle = jobs_bundle(tmp_path / "build")
    work = tmp_path / "work"
    with zipfile.ZipFile(bundle / "catalog.zip") as archive:
        archive.extractall(work / "catalog")
    with tarfile.open(job_environment(tmp_path / "env")) as archive:
        archive.extractall(work / "environment", filter="data")
    provided = tmp_path / "emr-provided"  # EMR puts its PySpark on the path; borrow ours
    provided.mkdir()
    for package in ("pyspark", "py4j"):
        (provided / package).symlink_to(Path(importlib.import_module(package).__file__ or "").parent)
    probe = """
import sys, importlib, zipimport
from importlib import _bootstrap_external
from pathlib import Path

compiled = []  # what is compiled from source, of the archives' modules: none, they carry their bytecode
from_source, zip_source = _bootstrap_external.SourceLoader.source_to_code, zipimport._compile_source
def source_to_code(loader, data, path, **options):
    compiled.append(str(path))
    return from_source(loader, data, path, **options)
def zipped_source(path, source):
    compiled.append(path)
    return zip_source(path, source)
_bootstrap_external.SourceLoader.source_to_code, zipimport._compile_source = source_to_code, zipped_source

import spark_jobs.archiver.job as a, spark_jobs.compaction.job as c
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog
assert a.parse_args(['--env', 'staging', '--topic', 'x', '--catalog', 'catalog']).catalog == Path('catalog')
deps = ['pyarrow', 'pandas', 'numpy', 'boto3', 'pydantic', 'yaml', 'fastavro', 'confluent_kafka', 'httpx']
outside = [d for d in deps if '/environment/site-packages/' not in importlib.import_module(d).__file__]
topics = load_topic_catalog(Path('catalog')).topics
ours = [p for p in compiled if '/environment/' in p or 'kafkalake_jobs.zip' in p]
print(sys.version_info[:2], a.__file__.split('/')[-4], len(topics), outside, len(ours), ours[:3])
"""
    assert Path(EMR_PYTHON).exists(), f"{EMR_PYTHON} (Debian package python3.11) stands in for EMR's Python 3.11"
    result = subprocess.run(
        [str(work / "environment" / "bin" / "python"), "-c", probe],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": f"{bundle / 'kafkalake_jobs.zip'}:{provided}"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(3, 11) kafkalake_jobs.zip 11 [] 0 []"


def test_two_companies_five_topics(tmp_path: Path) -> None:
    for company, domain, name, inference in [
        ("alpha", "sales", "orders", "crawler"),
        ("alpha", "sales", "returns", "native"),
        ("alpha", "ops", "tickets", "crawler"),
        ("beta", "iot", "pings", "crawler"),
        ("beta", "iot", "alerts", "native"),
    ]:
        write_topic(tmp_path / "catalog", company, domain, name, inference)
    catalog: TopicCatalog = load_topic_catalog(tmp_path / "catalog")
    app = App()
    built = build(app, {"staging": ENVIRONMENTS["staging"]}, catalog, tmp_path / "build")
    tpl = Template.from_stack(built["staging"])
    tpl.resource_count_is("AWS::Glue::Crawler", 3)
    tpl.resource_count_is("AWS::Glue::Database", 2)
    names = {c["Properties"]["Name"] for c in resources(tpl, "AWS::Glue::Crawler").values()}
    assert names == {
        "kafkalake-alpha_staging-orders",
        "kafkalake-alpha_staging-tickets",
        "kafkalake-beta_staging-pings",
    }
    assert AwsSolutionsChecks(app).validate_scope(built["staging"]).violations == []
