"""A fault-injecting HTTP proxy in front of a local service (moto's AWS endpoint, the schema registry): answers
chosen requests the way S3 does under throttling, outage or a missing permission, or not in time, and passes
everything else through unchanged.

In-process (unit tests on moto's ``mock_aws``), ``s3_answers`` gives a client the same answers without a proxy.

``FaultProxy(upstream).start()`` listens on 127.0.0.1 (a free port); point ``aws_endpoint_url`` (or the registry
URL) at ``proxy.url``. A ``Fault`` matches a method and a path pattern and answers ``times`` matching requests
(``None``: all of them) with its status and S3 error code, after ``delay`` seconds (a hung service: longer than the
client waits), or closes the connection without an answer (``NO_ANSWER``); a ``forward`` fault first passes the
request on, so the write happens and only its answer is lost (what makes botocore retry a write that landed).
``proxy.injected`` counts what was answered, ``proxy.passed`` what went through unanswered by a fault.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSResponse

from kafkalake.endpoints import Endpoints

SLOW_DOWN = (503, "SlowDown")
INTERNAL_ERROR = (500, "InternalError")
ACCESS_DENIED = (403, "AccessDenied")
UNAVAILABLE = (503, "ServiceUnavailable")
CONFLICT = (409, "ConditionalRequestConflict")
NO_ANSWER = (0, "NoAnswer")
"""Not an HTTP answer: the connection is closed without one (a reset, a load balancer dropping it)."""
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "te", "upgrade", "host"})
"""Request headers that describe the client's connection to the proxy, not the request; never forwarded."""


@dataclass
class Fault:
    method: str
    path: str
    """A regular expression searched in the request path (``/bucket/key?query``)."""
    status: int
    code: str
    times: int | None = None
    message: str = "injected by the test's fault proxy"
    delay: float = 0.0
    forward: bool = False
    """Pass the request on first (it takes effect upstream), then answer with the fault instead of the upstream."""
    seen: int = field(default=0, init=False)

    def takes(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.path, path):
            return False
        if self.times is not None and self.seen >= self.times:
            return False
        self.seen += 1
        return True

    def body(self) -> bytes:
        return (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{escape(self.code)}</Code>'
            f"<Message>{escape(self.message)}</Message><RequestId>fault-proxy</RequestId></Error>"
        ).encode()


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.upstream_host, self.upstream_port = target.hostname or "127.0.0.1", target.port or 80
        self.upstream_path = target.path.rstrip("/")
        self.faults: list[Fault] = []
        self.injected: Counter[str] = Counter()
        self.passed = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        """The upstream's URL through the proxy (with the upstream's path, e.g. the registry's API root)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.upstream_path}"

    def inject(
        self,
        method: str,
        path: str,
        status_code: tuple[int, str],
        times: int | None = None,
        *,
        message: str | None = None,
        delay: float = 0.0,
        forward: bool = False,
    ) -> Fault:
        fault = Fault(method, path, *status_code, times=times, delay=delay, forward=forward)
        if message is not None:
            fault.message = message
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def start(self) -> FaultProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self._lock:
            fault = next((f for f in self.faults if f.takes(method, path)), None)
            if fault is not None:
                self.injected[f"{fault.status} {fault.code}"] += 1
            else:
                self.passed += 1
            return fault

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """The upstream's status, headers and body for the request."""
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            headers = {**headers, "Host": f"{self.upstream_host}:{self.upstream_port}"}
            if body or method in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(method, path, body=body, headers=headers)
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _body(self) -> bytes:
                """The request body, also when the client sent it in chunks (Expect: 100-continue is answered by
                the base class before this)."""
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)

            def _answer(self, status: int, headers: list[tuple[str, str]], payload: bytes, length: int) -> None:
                try:
                    self.send_response_only(status)  # no Server and Date of the proxy's: the upstream's pass
                    if not any(name.lower() == "date" for name, _ in headers):
                        self.send_header("Date", self.date_time_string())  # S3 dates every answer
                    for name, value in headers:
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(length))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a delayed fault)
                    self.close_connection = True

            def _any(self) -> None:
                body = self._body()
                fault = proxy._fault_for(self.command, self.path)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if fault is not None:
                    if fault.forward:
                        proxy._forward(self.command, self.path, headers, body)
                    time.sleep(fault.delay)
                    if fault.status == NO_ANSWER[0]:
                        self.close_connection = True
                        return
                    error = fault.body()
                    self._answer(fault.status, [("Content-Type", "application/xml")], error, len(error))
                    return
                status, answer_headers, payload = proxy._forward(self.command, self.path, headers, body)
                kept = [(k, v) for k, v in answer_headers if k.lower() not in ("transfer-encoding", "connection")]
                length = len(payload)
                if self.command == "HEAD":  # no body: its Content-Length is the object's size, passed on as it was
                    length = int(next((v for k, v in kept if k.lower() == "content-length"), "0"))
                kept = [(k, v) for k, v in kept if k.lower() != "content-length"]
                self._answer(status, kept, payload, length)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        return Handler


class _Body:
    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.content


def s3_answers(*answers: tuple[int, str]) -> Callable[..., AWSResponse | None]:
    """A botocore ``before-send`` handler (register it first) answering a client's next calls as S3 would, one
    (status, error code) each, then letting calls through."""
    pending = list(answers)

    def answer(**_: Any) -> AWSResponse | None:
        if not pending:
            return None
        status, code = pending.pop(0)
        body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
        return AWSResponse("https://s3.amazonaws.com/", status, {}, _Body(body))

    return answer


@contextmanager
def aws_proxy(endpoints: Endpoints) -> Iterator[FaultProxy]:
    """A proxy in front of ``endpoints``' AWS endpoint, stopped after the block."""
    assert endpoints.aws_endpoint_url is not None
    proxy = FaultProxy(endpoints.aws_endpoint_url).start()
    try:
        yield proxy
    finally:
        proxy.stop()
