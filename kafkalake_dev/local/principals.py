"""Which pipeline principal each AWS call of a local run is made by: the role it would run as in AWS (the archiver,
compactor and erasure jobs' roles, the maintainer's and reconciler's), told to the local endpoint so that it can
record the call for the permission check (``kafkalake_dev.local.call_recording``).

In AWS a process has one role. Locally the tests run many jobs' code in one process, so a call's principal is found
from where it comes from:

- botocore in this process: the outermost frame of a principal's package on the calling thread's stack
  (``spark_jobs.erasure`` rewrites with ``spark_jobs.compaction``'s code: outermost, so erasure), else the principal of
  the thread that started this thread; the hook adds the ``X-Kafkalake-Principal`` header;
- Spark: each py4j call sets the Spark local property ``kafkalake.principal`` of the calling thread to that principal,
  so the Spark jobs it starts carry it to their tasks: Python workers (started by ``principal_daemon``) read it from
  the task, and S3A's credentials (``java/PrincipalCredentials.java``, built by ``s3a_credentials_jar``) name it;
- a job run with spark-submit (``kafkalake_dev.local.runner.run_job``) runs with its principal's access key
  (``principal_credentials``), as on EMR with its role's credentials.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final

from infra.assets import compiled_jar
from kafkalake.jobspec import Job
from kafkalake_dev.local.call_recording import ACCESS_KEY_PREFIX, PRINCIPAL_HEADER
from kafkalake_dev.local.endpoints import ACCESS_KEY

LOCAL_PROPERTY: Final = "kafkalake.principal"
PACKAGES: Final = (
    ("spark_jobs.archiver", "archiver"),
    ("spark_jobs.compaction", "compactor"),
    ("spark_jobs.erasure", "erasure"),
    ("lambdas.maintainer", "maintainer"),
    ("lambdas.reconciler", "reconciler"),
)
JOB_PRINCIPALS: Final = {Job.ARCHIVE: "archiver", Job.COMPACT: "compactor", Job.ERASE: "erasure"}
JAVA_SOURCE: Final = Path(__file__).parent / "java" / "PrincipalCredentials.java"
S3A_PROVIDER: Final = "kafkalake.local.PrincipalCredentials"
DAEMON_MODULE: Final = "kafkalake_dev.local.principal_daemon"

_state = threading.local()
_mode: dict[str, bool] = {}
"""Set by ``install``: whether this process is a Spark Python worker."""


def principal_credentials(job: Job) -> dict[str, str]:
    """The environment's credentials of a job run as its principal."""
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY_PREFIX + JOB_PRINCIPALS[job], "AWS_SECRET_ACCESS_KEY": ACCESS_KEY}


def module_principal(module: str) -> str | None:
    for package, principal in PACKAGES:
        if module == package or module.startswith(package + "."):
            return principal
    return None


def stack_principal(frame: FrameType | None) -> str | None:
    """The principal of the outermost frame of a principal's package, from ``frame`` outwards."""
    found = None
    while frame is not None:
        found = module_principal(frame.f_globals.get("__name__", "")) or found
        frame = frame.f_back
    return found


def task_principal() -> str | None:
    """In a Spark Python worker: the principal of the task being run (None outside a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return context.getLocalProperty(LOCAL_PROPERTY) or None


def current_principal() -> str | None:
    """The principal the calling code runs as, or None (the tests' own calls)."""
    if _mode.get("worker"):
        return task_principal()
    return thread_principal(sys._getframe(1))


def thread_principal(frame: FrameType | None) -> str | None:
    """The principal of the stack from ``frame`` outwards, else the one of the thread that started this thread;
    None inside ``not_recorded``."""
    if getattr(_state, "unrecorded", False):
        return None
    return stack_principal(frame) or getattr(threading.current_thread(), "_kafkalake_principal", None)


@contextmanager
def not_recorded(why: str) -> Iterator[None]:
    """The calls the block makes on this thread (and the Spark jobs it starts) are the test's own set-up, not a
    principal's, whatever code makes them: e.g. a lake written by an older release's layout. ``why`` says which."""
    if not why:
        raise ValueError("say why the calls are not the principal's")
    _state.unrecorded = True
    try:
        yield
    finally:
        _state.unrecorded = False


def _tag(request: Any, **_: Any) -> None:
    principal = current_principal()
    if principal:
        request.headers[PRINCIPAL_HEADER] = principal


def install(*, worker: bool = False) -> None:
    """Hook botocore (every client made from now on) and, outside Spark's workers, thread starts, in this process;
    idempotent. In a worker (``principal_daemon``) a call's principal is its task's."""
    if _mode:
        return
    _mode["worker"] = worker
    import botocore.session

    create_client = botocore.session.Session.create_client

    def tagged_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = create_client(self, *args, **kwargs)
        client.meta.events.register("before-sign", _tag)
        return client

    botocore.session.Session.create_client = tagged_client
    if worker:
        return
    start = threading.Thread.start

    def start_as_starter(self: threading.Thread) -> None:
        self._kafkalake_principal = current_principal()  # type: ignore[attr-defined]
        start(self)

    threading.Thread.start = start_as_starter  # type: ignore[method-assign]


def follow_in_spark(spark: Any) -> None:
    """Before each py4j call of this process, the calling thread's Spark local property ``kafkalake.principal`` is
    its principal (set only when it changes), so Spark jobs carry it to their tasks and S3A; idempotent."""
    gateway_client = spark.sparkContext._gateway._gateway_client
    if getattr(gateway_client, "_kafkalake_followed", False):  # the same session again (getOrCreate): once
        return
    gateway_client._kafkalake_followed = True
    context = spark.sparkContext._jsc
    send = gateway_client.send_command

    def send_as_principal(command: str, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_state, "setting", False):
            principal = thread_principal(sys._getframe(1))
            if principal != getattr(_state, "principal", None):
                _state.setting = True
                try:
                    context.setLocalProperty(LOCAL_PROPERTY, principal)
                finally:
                    _state.setting = False
                _state.principal = principal
        return send(command, *args, **kwargs)

    gateway_client.send_command = send_as_principal


def s3a_credentials_jar(spark_jars: list[Path]) -> Path:
    """``PrincipalCredentials`` compiled against the session's jars, once per source, in the cache."""
    return compiled_jar(JAVA_SOURCE, "principal-credentials", spark_jars)
