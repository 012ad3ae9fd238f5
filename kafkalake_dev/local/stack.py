"""The local stack: real Kafka (KRaft), a real Confluent-compatible registry (Apicurio), moto's server, Spark jars.

Everything is downloaded once from Maven Central into the cache (``~/.cache/kafkalake`` or
``$KAFKALAKE_CACHE``), then started on 127.0.0.1 as separate processes tracked by pid files under
``.stack/`` in the work tree. ``up`` is idempotent; ``down`` stops only processes it recorded.

Past 400 lines: the broker's configuration (a listener for each way Amazon MSK authenticates, the authorizer's log)
stays beside the downloads and the process handling that start it, the one place a reader looks for the stack.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra.assets import cached_folder, compiled_jar, fetch, maven
from infra.repo import REPO_ROOT, cache_dir
from kafkalake.kafka import settled
from kafkalake_dev.local.endpoints import (
    ACCESS_KEY,
    AWS_PORT,
    CONTROLLER_PORT,
    DEFAULTS,
    IAM_BRIEF_TOKEN_SECONDS,
    KAFKA_IAM_BRIEF_PORT,
    KAFKA_IAM_PORT,
    KAFKA_MTLS_PORT,
    KAFKA_PORT,
    KAFKA_SASL_PORT,
    KAFKA_TLS_PORT,
    KAFKA_USER,
    REGISTRY_PORT,
    REGISTRY_TLS_PORT,
)
from kafkalake_dev.local.tls import StackTls, stack_tls

KAFKA_VERSION = "3.9.1"
APICURIO_VERSION = "3.0.9"
KAFKA_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>kafkalake.stack</groupId><artifactId>kafka</artifactId><version>1</version><packaging>pom</packaging>
<dependencies>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{KAFKA_VERSION}</version></dependency>
<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
</dependencies></project>
"""
LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=WARN
log4j.logger.kafkalake.local=INFO
log4j.appender.authorizer=org.apache.log4j.RollingFileAppender
log4j.appender.authorizer.File={authorizer_log}
log4j.appender.authorizer.MaxFileSize=100MB
log4j.appender.authorizer.MaxBackupIndex=2
log4j.appender.authorizer.layout=org.apache.log4j.PatternLayout
log4j.appender.authorizer.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.authorizer.filter.1=org.apache.log4j.varia.StringMatchFilter
log4j.appender.authorizer.filter.1.StringToMatch=Principal = User:ANONYMOUS is
log4j.appender.authorizer.filter.1.AcceptOnMatch=false
log4j.logger.kafka.authorizer.logger=DEBUG, authorizer
log4j.additivity.kafka.authorizer.logger=false
"""
AUTHORIZER_LOG = Path("logs") / "kafka-authorizer.log"
"""Under the stack's folder (``authorizer_log``): the broker's authorizer decisions (``kafka.authorizer.logger``,
allowed ones at DEBUG, denied ones at INFO), one line each with the principal, the operation, the resource and the
request's API: ``[2026-11-29 01:26:26,965] DEBUG Principal = User:archiver is Allowed operation = READ from host =
127.0.0.1 on resource = Topic:LITERAL:orders for request = Fetch with resourceRefCount = 1 based on rule DefaultAllow
(kafka.authorizer.logger)``. The plaintext listener's super user (``User:ANONYMOUS``: the tests' set-up and the
broker's own requests) is left out; 100 MB a file, two more kept."""
MSK_IAM_VALIDATOR_SOURCE = Path(__file__).parent / "java" / "MskIamValidator.java"
MSK_IAM_VALIDATOR = "kafkalake.local.MskIamValidator"


def say(message: str) -> None:
    print(f"[stack] {message}", flush=True)


def state_dir() -> Path:
    return Path(os.environ.get("KAFKALAKE_STACK_DIR", REPO_ROOT / ".stack"))


def kafka_libs() -> Path:
    def fill(folder: Path) -> None:
        say(f"downloading Apache Kafka {KAFKA_VERSION} jars from Maven Central into {folder}")
        pom = folder.parent / "pom.xml"
        pom.write_text(KAFKA_POM)
        maven("-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={folder}", "-DincludeScope=runtime")

    return cached_folder(cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs", fill)


def apicurio_jar() -> Path:
    def fill(folder: Path) -> None:
        say(f"downloading Apicurio Registry {APICURIO_VERSION} from Maven Central into {folder}")
        unpack_from_maven(f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all", folder)

    return _runner_jar(cached_folder(cache_dir() / f"apicurio-registry-{APICURIO_VERSION}", fill))


def unpack_from_maven(coordinate: str, folder: Path) -> None:
    """A tar.gz artifact from Maven Central, unpacked into ``folder`` (the archive itself removed)."""
    maven("dependency:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={folder}")
    archive = next(folder.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    archive.unlink()


def _runner_jar(folder: Path) -> Path:
    """The Quarkus launcher: ``quarkus-run.jar`` (fast-jar layout) or ``*-runner.jar`` (legacy-jar layout)."""
    for pattern in ("quarkus-run.jar", "*-runner.jar"):
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
    raise RuntimeError(f"no quarkus-run.jar or *-runner.jar under {folder}; delete the folder to download again")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback health check
            return bool(200 <= response.status < 300)
    except OSError:
        return False


LISTENER_PORTS = (KAFKA_PORT, KAFKA_SASL_PORT, KAFKA_TLS_PORT, KAFKA_MTLS_PORT, KAFKA_IAM_PORT, KAFKA_IAM_BRIEF_PORT)


def _kafka_ok() -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        for port in LISTENER_PORTS:  # each: a broker started before a listener was added is restarted
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        AdminClient({"bootstrap.servers": f"127.0.0.1:{KAFKA_PORT}", "log_level": 0}).list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - any failure means "not healthy yet"
        return False
    return True


@dataclass(frozen=True)
class Service:
    name: str
    prepare: Callable[[Path], list[str]]
    """Downloads what the service needs, prepares its folder, returns the command that runs it."""
    healthy: Callable[[], bool]
    startup_seconds: int

    @property
    def pid_file(self) -> Path:
        return state_dir() / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return state_dir() / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded process while it runs. One this process started and that has exited is reaped here:
        until then it is a zombie, which ``kill(pid, 0)`` still finds (``stop`` would wait its whole timeout)."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return None
        except ChildProcessError:  # not this process's child: whoever started it reaps it
            pass
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid

    def start(self) -> None:
        if self.pid() is not None and self.healthy():
            say(f"{self.name}: already running (pid {self.pid()})")
            return
        if self.pid() is not None:
            self.stop()
        elif self.healthy():
            say(f"{self.name}: something else already answers on its port; using it (not ours to stop)")
            return
        work = state_dir() / self.name
        command = self.prepare(work)
        log = self.log_file.open("ab")
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(str(process.pid))
        say(f"{self.name}: started pid {process.pid}, waiting for health (log: {self.log_file})")
        deadline = time.monotonic() + self.startup_seconds
        while not self.healthy():
            if process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {process.returncode}; see {self.log_file}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not healthy after {self.startup_seconds}s; see {self.log_file}")
            time.sleep(0.5)
        say(f"{self.name}: healthy")

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        os.killpg(pid, signal.SIGTERM)
        for _ in range(60):
            if self.pid() is None:
                break
            time.sleep(0.25)
        else:
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        say(f"{self.name}: stopped (pid {pid})")


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java not found on PATH; install a Java 17 JDK (apt-get install openjdk-17-jdk-headless)")
    return java


def local_tls() -> StackTls:
    """The certificates the broker's TLS listeners and the registry's HTTPS port present, and the mutual TLS
    listener's client certificate (made on first use): ``ca_pem()`` is what a client trusts."""
    return stack_tls(state_dir() / "tls")


def authorizer_log() -> Path:
    """The broker's authorizer decisions (``AUTHORIZER_LOG``)."""
    return state_dir() / AUTHORIZER_LOG


def msk_iam_validator_jar() -> Path:
    """The IAM listener's token check (``java/MskIamValidator.java``) compiled against the broker's jars, once per
    source, in the cache."""
    return compiled_jar(MSK_IAM_VALIDATOR_SOURCE, "msk-iam-validator", [kafka_libs() / "*"])


def _iam_listener(name: str, tls: StackTls, lifetime_seconds: int | None = None) -> list[str]:
    """Settings of the IAM listener ``name``: OAUTHBEARER over TLS, tokens checked by ``MskIamValidator`` for the
    local region and secret; with ``lifetime_seconds``, tokens count as expired that long after signing and a session
    ends with its token (``connections.max.reauth.ms``), so a client must sign again and re-authenticate."""
    brief = f' lifetimeSeconds="{lifetime_seconds}"' if lifetime_seconds else ""
    lines = [
        f"listener.name.{name}.sasl.enabled.mechanisms=OAUTHBEARER",
        f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class={MSK_IAM_VALIDATOR}",
        # region and secret: the validator's; the broker's own login (a token it never sends: brokers talk over
        # PLAINTEXT) is Kafka's unsecured one, which needs a subject
        f"listener.name.{name}.oauthbearer.sasl.jaas.config="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'region="{DEFAULTS.region}" secret="{ACCESS_KEY}"{brief} unsecuredLoginStringClaim_sub="broker";',
        f"listener.name.{name}.ssl.keystore.type=PEM",
        f"listener.name.{name}.ssl.keystore.location={tls.keystore}",
    ]
    if lifetime_seconds:
        lines.append(f"listener.name.{name}.oauthbearer.connections.max.reauth.ms={4 * lifetime_seconds * 1000}")
    return lines


def _kafka_listeners(tls: StackTls) -> list[str]:
    """The broker's listeners: plaintext (its ANONYMOUS a super user), SASL PLAIN, SCRAM over TLS, mutual TLS and
    Amazon MSK's IAM access control twice (the second's tokens short-lived); ACLs decide, and a resource without ACLs
    is open."""
    listeners = (
        f"PLAINTEXT://127.0.0.1:{KAFKA_PORT},SASL_PLAINTEXT://127.0.0.1:{KAFKA_SASL_PORT},"
        f"SASL_SSL://127.0.0.1:{KAFKA_TLS_PORT},SSL://127.0.0.1:{KAFKA_MTLS_PORT},IAM://127.0.0.1:{KAFKA_IAM_PORT},"
        f"IAM_BRIEF://127.0.0.1:{KAFKA_IAM_BRIEF_PORT}"
    )
    return [
        f"listeners={listeners},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}",
        f"advertised.listeners={listeners}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL,SSL:SSL,IAM:SASL_SSL,IAM_BRIEF:SASL_SSL",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{KAFKA_USER[0]}="{KAFKA_USER[1]}";',
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.ssl.keystore.type=PEM",
        f"listener.name.sasl_ssl.ssl.keystore.location={tls.keystore}",
        "listener.name.ssl.ssl.keystore.type=PEM",
        f"listener.name.ssl.ssl.keystore.location={tls.keystore}",
        "listener.name.ssl.ssl.truststore.type=PEM",
        f"listener.name.ssl.ssl.truststore.location={tls.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        *_iam_listener("iam", tls),
        *_iam_listener("iam_brief", tls, IAM_BRIEF_TOKEN_SECONDS),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:ANONYMOUS",
        "allow.everyone.if.no.acl.found=true",
    ]


def _prepare_kafka(work: Path) -> list[str]:
    libs = kafka_libs()
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    authorizer_log().parent.mkdir(parents=True, exist_ok=True)
    (work / "log4j.properties").write_text(LOG4J.format(authorizer_log=authorizer_log()))
    props = work / "server.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{CONTROLLER_PORT}",
                *_kafka_listeners(local_tls()),
                f"log.dirs={data}",
                "num.partitions=3",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                "log.retention.hours=-1",
            ]
        )
        + "\n"
    )
    classpath = f"{libs}/*:{msk_iam_validator_jar()}"
    java = [_java(), "-Xmx768m", f"-Dlog4j.configuration=file:{work / 'log4j.properties'}", "-cp", classpath]
    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        storage = [*java, "kafka.tools.StorageTool", "format", "--ignore-formatted", "-c", str(props)]
        subprocess.run(
            [*storage, f"--cluster-id={cluster_id}"],  # "=": an id may start with "-"
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return [*java, "kafka.Kafka", str(props)]


def _prepare_registry(work: Path) -> list[str]:
    jar = apicurio_jar()
    work.mkdir(parents=True, exist_ok=True)
    tls = local_tls()
    return [
        _java(),
        "-Xmx512m",
        f"-Dquarkus.http.port={REGISTRY_PORT}",
        f"-Dquarkus.http.ssl-port={REGISTRY_TLS_PORT}",
        f"-Dquarkus.http.ssl.certificate.files={tls.chain}",
        f"-Dquarkus.http.ssl.certificate.key-files={tls.key}",
        "-Dquarkus.http.host=127.0.0.1",
        "-Dquarkus.log.level=WARN",
        "-jar",
        str(jar),
    ]


def _prepare_moto(work: Path) -> list[str]:
    work.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "kafkalake_dev.local.moto_server", "-H", "127.0.0.1", "-p", str(AWS_PORT)]


SERVICES = (
    Service("kafka", _prepare_kafka, _kafka_ok, 90),
    Service(
        "registry",
        _prepare_registry,
        lambda: _http_ok(f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7/subjects"),
        120,
    ),
    Service("moto", _prepare_moto, lambda: _http_ok(f"http://127.0.0.1:{AWS_PORT}/moto-api/"), 60),
)


def _reset_if_memory_lost() -> None:
    """The registry and moto keep their state in memory only. When either has to start, Kafka's data and the
    local state that refers to it (workload records, inferred tables) go too, so topics never hold records whose
    schema ids the registry forgot or whose archived objects the lake lost."""
    memory_only = [s for s in SERVICES if s.name != "kafka" and not s.healthy()]
    kafka = next(s for s in SERVICES if s.name == "kafka")
    data = state_dir() / "kafka" / "data"
    if not memory_only or (kafka.healthy() and kafka.pid() is None):  # a Kafka this checkout did not start
        return
    kafka.stop()
    stale = [data, state_dir() / "workloads", *state_dir().glob("tables-*.json")]
    if any(path.exists() for path in stale):
        say(f"{', '.join(s.name for s in memory_only)} start empty, so Kafka's data in {data} starts empty too")
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def up() -> list[str]:
    """Start every service that is not already healthy; return the names this call started."""
    state_dir().mkdir(parents=True, exist_ok=True)
    fetch()  # the jars local Spark loads and the job environment the runner unpacks
    _reset_if_memory_lost()
    started = []
    for service in SERVICES:
        was_running = service.pid() is not None and service.healthy()
        service.start()
        if not was_running and service.pid() is not None:
            started.append(service.name)
    _scram_user()
    return started


def _scram_user() -> None:
    """``KAFKA_USER``'s SCRAM-SHA-512 credentials on the broker (KRaft keeps them in its metadata; set on every
    ``up``, so a broker whose data folder predates the TLS listener has them too)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{KAFKA_PORT}"})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(KAFKA_USER[0], info, KAFKA_USER[1].encode())

    def request() -> None:
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)

    settled(request)  # a broker that just started may not take it yet


def down(names: list[str] | None = None) -> None:
    for service in reversed(SERVICES):
        if names is None or service.name in names:
            service.stop()


def status() -> dict[str, str]:
    return {
        s.name: ("healthy" if s.healthy() else "unhealthy") + f" (pid {s.pid()})" if s.pid() else "stopped"
        for s in SERVICES
    }


@contextmanager
def running() -> Iterator[None]:
    """Start the stack for the duration of a block; stop only what this block started."""
    started = up()
    try:
        yield
    finally:
        down(started)
