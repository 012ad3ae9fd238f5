"""The local endpoint's record of the pipeline's AWS calls: each request a pipeline principal makes (botocore from
the jobs' drivers and Python workers and from the Lambdas, and Spark's S3A from the JVM) is appended as one JSON line
to a file, with the principal it runs as. ``kafkalake_dev.checks.permissions`` maps the lines to IAM requests and
evaluates them against the synthesized templates.

Which principal a request runs as reaches the endpoint in one of two ways (``kafkalake_dev.local.principals``): the
``X-Kafkalake-Principal`` header that the in-process hooks add, or an access key id ``principal-<name>`` (a job run
with spark-submit runs with its principal's credentials, as on EMR with its role's). Requests without a principal
are the tests' own set-up and checks, and are not recorded.

Recording is switched by ``POST /kafkalake/recording`` (the body is the file to append to) and ``DELETE`` on the same
path, so a server already running (``kafkalake stack up``) records a test session's calls too.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

CONTROL_PATH: Final = "/kafkalake/recording"
PRINCIPAL_HEADER: Final = "X-Kafkalake-Principal"
ACCESS_KEY_PREFIX: Final = "principal-"
REQUEST_HEADERS: Final = (
    "x-amz-target",
    "content-type",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-copy-source",
    "x-amz-tagging",
    "if-match",
    "if-none-match",
    "x-amz-metadata-directive",
    "user-agent",
)
RESPONSE_HEADERS: Final = ("x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id")
KEYS_SUFFIX: Final = ".keys.json"
"""Beside a recording: the local stack's restricted key (``{"restricted": [arn, key id]}``), which the mapping tells
apart from the lake key by it."""
MAX_BODY: Final = 1 << 18
"""Bodies kept: the JSON and query APIs' (Glue, SQS, KMS, ...) and S3's DeleteObjects lists; never object bytes."""
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/[^/]+/([^/]+)/")


class Recorder:
    """Where recorded calls go (None: not recording); thread-safe, one line per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: io.TextIOWrapper | None = None
        self.path: Path | None = None

    def start(self, path: Path) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file, self.path = path.open("a", buffering=1), path

    def stop(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
            self._file, self.path = None, None

    @property
    def on(self) -> bool:
        return self._file is not None

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write(json.dumps(record) + "\n")


def principal_of(environ: dict[str, Any]) -> tuple[str | None, str]:
    """(the principal a request runs as or None, the AWS service its signature names)."""
    match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    access_key, service = (match.group(1), match.group(2)) if match else ("", "")
    header = environ.get("HTTP_" + PRINCIPAL_HEADER.upper().replace("-", "_"))
    if header:
        return header, service
    if access_key.startswith(ACCESS_KEY_PREFIX):
        return access_key.removeprefix(ACCESS_KEY_PREFIX), service
    return None, service


def keeps_body(service: str, query: str) -> bool:
    return service != "s3" or re.search(r"(^|&)delete(=|&|$)", query) is not None


def recording_app(app: Callable[..., Iterable[bytes]], recorder: Recorder) -> Callable[..., Iterable[bytes]]:
    """``app`` (moto's WSGI application) with the control path and a line per principal's request."""

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == CONTROL_PATH:
            return control(environ, start_response, recorder)
        principal, service = principal_of(environ)
        if principal is None or not recorder.on:
            return app(environ, start_response)
        query = environ.get("QUERY_STRING", "")
        body = ""
        if keeps_body(service, query):
            raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0) or -1)
            environ["wsgi.input"] = io.BytesIO(raw)
            if "gzip" in environ.get("HTTP_CONTENT_ENCODING", ""):  # botocore compresses PutMetricData
                raw = gzip.decompress(raw)
            body = raw[:MAX_BODY].decode("utf-8", "replace")
        seen: dict[str, Any] = {}

        def remember(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            seen["status"] = int(status.split(maxsplit=1)[0])
            seen["response"] = {k.lower(): v for k, v in headers if k.lower() in RESPONSE_HEADERS}
            return start_response(status, headers, *rest)

        result = app(environ, remember)
        recorder.write(
            {
                "time": time.time(),
                "principal": principal,
                "service": service,
                "method": environ.get("REQUEST_METHOD", ""),
                "host": environ.get("HTTP_HOST", ""),
                "path": environ.get("PATH_INFO", ""),
                "query": query,
                "headers": {
                    h: environ[key]
                    for h in REQUEST_HEADERS
                    if (key := "HTTP_" + h.upper().replace("-", "_")) in environ
                    or (key := h.upper().replace("-", "_")) in environ
                },
                "body": body,
                "status": seen.get("status", 0),
                "response": seen.get("response", {}),
            }
        )
        return result

    return handle


def control(environ: dict[str, Any], start_response: Callable[..., Any], recorder: Recorder) -> list[bytes]:
    method = environ.get("REQUEST_METHOD")
    if method == "POST":
        target = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)).decode().strip()
        recorder.start(Path(target))
    elif method == "DELETE":
        recorder.stop()
    answer = json.dumps({"recording": str(recorder.path) if recorder.path else None}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
    return [answer]
