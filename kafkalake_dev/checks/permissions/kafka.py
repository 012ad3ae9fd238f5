"""From the local broker's authorizer decisions to what Amazon MSK with IAM access control would authorize: each
Kafka decision a pipeline principal caused (``User:archiver`` on the broker's IAM listener) becomes the
``kafka-cluster:`` IAM requests AWS documents for it, on the deployed cluster's, topic's or group's ARN, in the
deployed environment's names (``IamRequest``, evaluated like the S3 and Glue calls of ``mapping``).
Entry point: ``kafka_requests(log_lines, cluster_arn, names)``.

The decisions: the broker logs each one on ``kafka.authorizer.logger`` (allowed ones at DEBUG, denied ones at
INFO). Kafka 3.9's ``StandardAuthorizer`` (KRaft; ``StandardAuthorizerData.buildAuditMessage`` in
metadata/src/main/java/org/apache/kafka/metadata/authorizer/StandardAuthorizerData.java at the tag 3.9.0-rc3,
version 3.9.0; the 3.9.1 jar's class builds the same) writes::

    Principal = <principal> is <Allowed|Denied> operation = <AclOperation> from host = <address>
    on resource = <ResourceType in PascalCase>:<PatternType>:<name> for request = <ApiKeys name>
    with resourceRefCount = <n> based on rule <SuperUser|DefaultAllow|DefaultDeny|MatchingAcl(acl=StandardAcl(...))>

on one line, e.g. ``Principal = User:archiver is Allowed operation = READ from host = 127.0.0.1 on resource =
Topic:LITERAL:orders for request = Fetch with resourceRefCount = 2 based on rule DefaultAllow``. ZooKeeper mode's
``AclAuthorizer`` (core/src/main/scala/kafka/security/authorizer/AclAuthorizer.scala) writes the same without the
rule and with ``Operation = Read`` (PascalCase); both are read. Whatever the log layout adds around the message (the
stack's ``[%d] %p %m (%c)%n``) is ignored. Allowed and denied decisions are mapped alike: the local broker's answer
(its ACLs, ``allow.everyone.if.no.acl.found``) is not MSK's, the deployed policy decides. What the broker does not
log at DEBUG or INFO is not seen: decisions taken only to compute authorized operations, and the denials of a
filter. A Metadata request for all topics (``AdminClient.list_topics()``, the archiver's drift) is such a filter:
on MSK it leaves out, silently, the topics the role may not describe, but its allowed decisions are logged like an
explicit request's and cannot be told from them, so they are mapped (the stricter reading): DescribeTopic on every
topic the broker listed.

The actions: AWS's table, "Semantics of IAM authorization policy actions and resources", Amazon MSK Developer Guide,
https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html#actions (read in the guide's GitHub copy,
awsdocs/amazon-msk-developer-guide doc_source/iam-access-control.md, "Semantics of actions and resources"): "When you
include in your authorization policy an action from the Action column of the table, you must also include the
corresponding actions from the Required actions column." Its rows (Action | Description | Required actions |
Required resources), each Kafka ACL named "equivalent to Apache Kafka's <OPERATION> <RESOURCE> ACL"::

    kafka-cluster:Connect | Grants permission to connect and authenticate to the cluster. | None | cluster
    kafka-cluster:DescribeCluster | ... equivalent to Apache Kafka's DESCRIBE CLUSTER ACL. | Connect | cluster
    kafka-cluster:AlterCluster | ... ALTER CLUSTER ACL. | Connect, DescribeCluster | cluster
    kafka-cluster:DescribeClusterDynamicConfiguration | ... DESCRIBE_CONFIGS CLUSTER ACL. | Connect | cluster
    kafka-cluster:AlterClusterDynamicConfiguration | ... ALTER_CONFIGS CLUSTER ACL. |
        Connect, DescribeClusterDynamicConfiguration | cluster
    kafka-cluster:WriteDataIdempotently | ... IDEMPOTENT_WRITE CLUSTER ACL. | Connect, WriteData | cluster
    kafka-cluster:CreateTopic | ... CREATE CLUSTER/TOPIC ACL. | Connect | topic
    kafka-cluster:DescribeTopic | ... DESCRIBE TOPIC ACL. | Connect | topic
    kafka-cluster:AlterTopic | ... ALTER TOPIC ACL. | Connect, DescribeTopic | topic
    kafka-cluster:DeleteTopic | ... DELETE TOPIC ACL. | Connect, DescribeTopic | topic
    kafka-cluster:DescribeTopicDynamicConfiguration | ... DESCRIBE_CONFIGS TOPIC ACL. | Connect | topic
    kafka-cluster:AlterTopicDynamicConfiguration | ... ALTER_CONFIGS TOPIC ACL. |
        Connect, DescribeTopicDynamicConfiguration | topic
    kafka-cluster:ReadData | Grants permission to read data from topics on a cluster, equivalent to Apache Kafka's
        READ TOPIC ACL. | Connect, DescribeTopic, AlterGroup | topic
    kafka-cluster:WriteData | ... WRITE TOPIC ACL | Connect, DescribeTopic | topic
    kafka-cluster:DescribeGroup | ... DESCRIBE GROUP ACL. | Connect | group
    kafka-cluster:AlterGroup | Grants permission to join groups on a cluster, equivalent to Apache Kafka's READ GROUP
        ACL. | Connect, DescribeGroup | group
    kafka-cluster:DeleteGroup | ... DELETE GROUP ACL. | Connect, DescribeGroup | group
    kafka-cluster:DescribeTransactionalId | ... DESCRIBE TRANSACTIONAL_ID ACL. | Connect | transactional-id
    kafka-cluster:AlterTransactionalId | ... WRITE TRANSACTIONAL_ID ACL. |
        Connect, DescribeTransactionalId, WriteData | transactional-id

Which Kafka request needs which ACL is Kafka's (its KafkaApis authorizes, the decision names it): Fetch is READ on
the topic (ReadData), Metadata and ListOffsets DESCRIBE on the topic (DescribeTopic), OffsetCommit READ on the group
and on the topic (AlterGroup, ReadData), OffsetFetch and FindCoordinator DESCRIBE on the group (DescribeGroup),
OffsetFetch also DESCRIBE on its topics.

Where the table leaves room, the stricter reading:
- every decision is also a ``kafka-cluster:Connect`` on the cluster (every action requires it);
- a required action is asked with the action, recursively: on the same resource when it is of the same kind
  (ReadData → DescribeTopic on the topic, AlterGroup → DescribeGroup on the group), on the cluster when it is a
  cluster's. When it is of another kind the decision does not name (ReadData → AlterGroup: a Fetch names no group;
  WriteDataIdempotently and AlterTransactionalId → WriteData: no topic), the principal must have asked for that
  action on some resource of its own in the same log (so the policy grants it somewhere, and that request is
  evaluated); otherwise the check fails (``KafkaUnmapped``);
- CREATE on the cluster (the right to create any topic) is ``kafka-cluster:CreateTopic`` on every topic of the
  cluster (``topic/<name>/<uuid>/*``): a policy granting it on named topics does not cover it;
- an operation the table does not name (CLUSTER_ACTION, e.g. WriteTxnMarkers; DESCRIBE_CONFIGS or ALTER_CONFIGS of a
  group; delegation tokens; users) or a pattern other than LITERAL is a finding (``KafkaUnmapped``), never skipped.

Names: the recorded topics are the tests' (``test.<catalog name>.<hex>``, ``tests/integration/archive_helpers.fresh``),
the deployed ones the catalog's (``KafkaNames``); groups follow their topic (``kafkalake.naming.consumer_group``).

Past 400 lines because a third of it is AWS's table, quoted row by row beside the three dictionaries that encode it
(``ACTIONS``, ``REQUIRED``, ``RESOURCE_KIND``) so that a reader checks one against the other in one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from kafkalake.naming import ARCHIVER_GROUP_PREFIX, SHARED_READ_GROUP
from kafkalake.topic_catalog import Topic
from kafkalake_dev.checks.permissions.mapping import Unmapped
from kafkalake_dev.checks.permissions.requests import PRINCIPALS, IamRequest, Principal

Kind = Literal["cluster", "topic", "group", "transactional-id"]

ACTIONS: Final[dict[tuple[str, str], str]] = {
    ("DESCRIBE", "Cluster"): "kafka-cluster:DescribeCluster",
    ("ALTER", "Cluster"): "kafka-cluster:AlterCluster",
    ("DESCRIBE_CONFIGS", "Cluster"): "kafka-cluster:DescribeClusterDynamicConfiguration",
    ("ALTER_CONFIGS", "Cluster"): "kafka-cluster:AlterClusterDynamicConfiguration",
    ("IDEMPOTENT_WRITE", "Cluster"): "kafka-cluster:WriteDataIdempotently",
    ("CREATE", "Cluster"): "kafka-cluster:CreateTopic",
    ("CREATE", "Topic"): "kafka-cluster:CreateTopic",
    ("DESCRIBE", "Topic"): "kafka-cluster:DescribeTopic",
    ("ALTER", "Topic"): "kafka-cluster:AlterTopic",
    ("DELETE", "Topic"): "kafka-cluster:DeleteTopic",
    ("DESCRIBE_CONFIGS", "Topic"): "kafka-cluster:DescribeTopicDynamicConfiguration",
    ("ALTER_CONFIGS", "Topic"): "kafka-cluster:AlterTopicDynamicConfiguration",
    ("READ", "Topic"): "kafka-cluster:ReadData",
    ("WRITE", "Topic"): "kafka-cluster:WriteData",
    ("DESCRIBE", "Group"): "kafka-cluster:DescribeGroup",
    ("READ", "Group"): "kafka-cluster:AlterGroup",
    ("DELETE", "Group"): "kafka-cluster:DeleteGroup",
    ("DESCRIBE", "TransactionalId"): "kafka-cluster:DescribeTransactionalId",
    ("WRITE", "TransactionalId"): "kafka-cluster:AlterTransactionalId",
}
"""(Kafka ACL operation, resource type as the log names it) → the action AWS's table says is "equivalent to" it."""

CONNECT: Final = "kafka-cluster:Connect"
REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    CONNECT: (),
    "kafka-cluster:DescribeCluster": (CONNECT,),
    "kafka-cluster:AlterCluster": (CONNECT, "kafka-cluster:DescribeCluster"),
    "kafka-cluster:DescribeClusterDynamicConfiguration": (CONNECT,),
    "kafka-cluster:AlterClusterDynamicConfiguration": (CONNECT, "kafka-cluster:DescribeClusterDynamicConfiguration"),
    "kafka-cluster:WriteDataIdempotently": (CONNECT, "kafka-cluster:WriteData"),
    "kafka-cluster:CreateTopic": (CONNECT,),
    "kafka-cluster:DescribeTopic": (CONNECT,),
    "kafka-cluster:AlterTopic": (CONNECT, "kafka-cluster:DescribeTopic"),
    "kafka-cluster:DeleteTopic": (CONNECT, "kafka-cluster:DescribeTopic"),
    "kafka-cluster:DescribeTopicDynamicConfiguration": (CONNECT,),
    "kafka-cluster:AlterTopicDynamicConfiguration": (CONNECT, "kafka-cluster:DescribeTopicDynamicConfiguration"),
    "kafka-cluster:ReadData": (CONNECT, "kafka-cluster:DescribeTopic", "kafka-cluster:AlterGroup"),
    "kafka-cluster:WriteData": (CONNECT, "kafka-cluster:DescribeTopic"),
    "kafka-cluster:DescribeGroup": (CONNECT,),
    "kafka-cluster:AlterGroup": (CONNECT, "kafka-cluster:DescribeGroup"),
    "kafka-cluster:DeleteGroup": (CONNECT, "kafka-cluster:DescribeGroup"),
    "kafka-cluster:DescribeTransactionalId": (CONNECT,),
    "kafka-cluster:AlterTransactionalId": (
        CONNECT,
        "kafka-cluster:DescribeTransactionalId",
        "kafka-cluster:WriteData",
    ),
}
"""The table's "Required actions" column."""

RESOURCE_KIND: Final[dict[str, Kind]] = {
    CONNECT: "cluster",
    "kafka-cluster:DescribeCluster": "cluster",
    "kafka-cluster:AlterCluster": "cluster",
    "kafka-cluster:DescribeClusterDynamicConfiguration": "cluster",
    "kafka-cluster:AlterClusterDynamicConfiguration": "cluster",
    "kafka-cluster:WriteDataIdempotently": "cluster",
    "kafka-cluster:CreateTopic": "topic",
    "kafka-cluster:DescribeTopic": "topic",
    "kafka-cluster:AlterTopic": "topic",
    "kafka-cluster:DeleteTopic": "topic",
    "kafka-cluster:DescribeTopicDynamicConfiguration": "topic",
    "kafka-cluster:AlterTopicDynamicConfiguration": "topic",
    "kafka-cluster:ReadData": "topic",
    "kafka-cluster:WriteData": "topic",
    "kafka-cluster:DescribeGroup": "group",
    "kafka-cluster:AlterGroup": "group",
    "kafka-cluster:DeleteGroup": "group",
    "kafka-cluster:DescribeTransactionalId": "transactional-id",
    "kafka-cluster:AlterTransactionalId": "transactional-id",
}
"""The table's "Required resources" column: the kind of ARN each action is granted on."""

LOG_KINDS: Final[dict[str, Kind]] = {
    "Cluster": "cluster",
    "Topic": "topic",
    "Group": "group",
    "TransactionalId": "transactional-id",
}
"""Kafka's resource types (as ``SecurityUtils.resourceTypeName`` prints them) that have an MSK ARN."""

AUDIT: Final = re.compile(
    r"Principal = (?P<principal>.+?) is (?P<outcome>Allowed|Denied) [Oo]peration = (?P<operation>\w+)"
    r" from host = (?P<host>\S*) on resource = (?P<resource_type>[A-Za-z]+):(?P<pattern_type>[A-Z_]+):(?P<name>.*)"
    r" for request = (?P<api>\w+) with resourceRefCount = (?P<count>\d+)"
    r"(?: based on rule (?P<rule>.+?))?(?: \(kafka\.authorizer\.logger\))?\s*$"
)
"""One decision of ``kafka.authorizer.logger`` (StandardAuthorizer's message, or AclAuthorizer's without the rule),
wherever the layout puts it on the line."""

CLUSTER_ARN: Final = re.compile(
    r"^(?P<head>arn:[a-z-]+:kafka:[a-z0-9-]+:\d{12}):cluster/(?P<name>[^/]+)/(?P<uuid>[^/]+)$"
)
TEST_TOPIC: Final = re.compile(r"^test\.(?P<name>[^.]+)\.(?P<rest>.+)$")
"""A test's topic (``archive_helpers.fresh``): ``test.<catalog topic's name>.<hex>``."""


@dataclass(frozen=True)
class KafkaUnmapped(Unmapped):
    """A decision the table gives no action for, a line that is no decision, or an action's requirement on a
    resource no decision names: the check fails on it (``__main__`` reports every ``Unmapped``)."""

    def message(self) -> str:
        return f"{self.principal}: {self.call}: {self.reason} ({__name__})"


@dataclass(frozen=True)
class KafkaDecision:
    """One authorizer decision, as logged."""

    principal: str
    """Kafka's principal, ``User:archiver``."""
    allowed: bool
    operation: str
    """Kafka's ACL operation, as ``AclOperation`` names it (``READ``, ``DESCRIBE_CONFIGS``)."""
    resource_type: str
    """As the log names it: ``Topic``, ``Group``, ``Cluster``, ``TransactionalId``, ``DelegationToken``, ``User``."""
    pattern_type: str
    name: str
    api: str
    """The request's API (``ApiKeys`` name): ``Fetch``, ``Metadata``, ``OffsetCommit``..."""
    host: str = ""
    rule: str = ""

    def describe(self) -> str:
        return f"kafka.{self.api} {self.operation} {self.resource_type}:{self.name}"


def parse_decision(line: str) -> KafkaDecision | None:
    """The decision a log line holds, or None."""
    found = AUDIT.search(line)
    if found is None:
        return None
    operation = found["operation"]
    if not operation.isupper():  # AclAuthorizer's PascalCase (SecurityUtils.operationName)
        operation = re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()
    return KafkaDecision(
        principal=found["principal"],
        allowed=found["outcome"] == "Allowed",
        operation=operation,
        resource_type=found["resource_type"],
        pattern_type=found["pattern_type"],
        name=found["name"],
        api=found["api"],
        host=found["host"],
        rule=found["rule"] or "",
    )


def pipeline_principal(kafka_principal: str) -> Principal | None:
    """``User:archiver`` → ``archiver`` (the IAM listener names a token's signing role so); None for any other
    principal (``User:ANONYMOUS``, the tests' SASL and TLS users)."""
    kind, _, name = kafka_principal.partition(":")
    return next((p for p in PRINCIPALS if kind == "User" and name == p), None)


@dataclass(frozen=True)
class KafkaNames:
    """The deployed environment's topics, and how a local topic's name stands for one."""

    topics: Mapping[str, str] = field(default_factory=dict)
    """Catalog topic name → its deployed Kafka topic (``card-authorized`` →
    ``staging.acme.payments.card-authorized``)."""

    @classmethod
    def of(cls, deployed: Iterable[Topic]) -> KafkaNames:
        """From the deployed environment's catalog topics (``load_topic_catalog(...).for_env(DEPLOYED.env)``)."""
        return cls({t.name: t.kafka_topic for t in deployed})

    def deployed_topic(self, local: str) -> str:
        """The deployed topic ``local`` stands for: itself when deployed; a test's ``test.<name>.<hex>`` the
        catalog's topic ``<name>``; a topic named by the convention in another environment
        (``<env>.<company>.<domain>.<name>``) the deployed one of the same company, domain and name; any other
        ``test.`` topic (of a test's own catalog) the catalog's first, as ``mapping.deployed_database`` does (the
        stack grants the same on every catalog topic); any other topic itself (the policy then decides on it as
        named)."""
        deployed = sorted(set(self.topics.values()))
        if local in deployed:
            return local
        test = TEST_TOPIC.match(local)
        if test and test["name"] in self.topics:
            return self.topics[test["name"]]
        rest = local.partition(".")[2]
        renamed = next((d for d in deployed if rest and d.partition(".")[2] == rest), None)
        if renamed is not None:
            return renamed
        if local.startswith("test.") and deployed:
            return deployed[0]
        return local

    def deployed_group(self, local: str) -> str:
        """A topic's archiver group (``kafkalake-archiver.<topic>``) as its deployed topic's; any other group (the
        light passes' ``SHARED_READ_GROUP``, others') as named."""
        if local.startswith(ARCHIVER_GROUP_PREFIX) and local != SHARED_READ_GROUP:
            return ARCHIVER_GROUP_PREFIX + self.deployed_topic(local.removeprefix(ARCHIVER_GROUP_PREFIX))
        return local


@dataclass(frozen=True)
class ClusterArns:
    """The ARNs of a cluster and of its topics, groups and transactional ids (the table's resources:
    ``arn:aws:kafka:<region>:<account>:topic/<cluster name>/<cluster uuid>/<topic>`` and alike)."""

    cluster: str

    def __post_init__(self) -> None:
        if not CLUSTER_ARN.match(self.cluster):
            raise ValueError(
                f"{self.cluster!r} is not an MSK cluster ARN (arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>)"
            )

    def of(self, kind: Kind, name: str) -> str:
        if kind == "cluster":
            return self.cluster
        found = CLUSTER_ARN.match(self.cluster)
        assert found is not None  # checked in __post_init__
        return f"{found['head']}:{kind}/{found['name']}/{found['uuid']}/{name}"


def decision_requests(
    decision: KafkaDecision, principal: Principal, arns: ClusterArns, names: KafkaNames
) -> tuple[list[IamRequest], list[tuple[str, str]], str | None]:
    """The IAM requests one decision needs (its action and the required ones on its resource or the cluster), the
    required actions on resources of another kind it does not name (action, the action that requires it), and why
    it cannot be mapped (None when it can)."""
    kind = LOG_KINDS.get(decision.resource_type)
    action = ACTIONS.get((decision.operation, decision.resource_type))
    if decision.pattern_type != "LITERAL":
        return [], [], f"pattern {decision.pattern_type}: Kafka authorizes literal resources only"
    if kind is None or action is None:
        table = "https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html"
        return (
            [],
            [],
            f"{table} names no action equivalent to Kafka's {decision.operation} {decision.resource_type} ACL",
        )
    if kind == "topic":
        resource = arns.of("topic", names.deployed_topic(decision.name))
    elif kind == "group":
        resource = arns.of("group", names.deployed_group(decision.name))
    elif kind == "cluster" and RESOURCE_KIND[action] == "topic":  # CREATE CLUSTER: any topic
        resource = arns.of("topic", "*")
    else:
        resource = arns.of(kind, decision.name)
    requests: dict[str, IamRequest] = {}
    elsewhere: list[tuple[str, str]] = []

    def ask(wanted: str, on: str) -> None:
        if wanted in requests:
            return
        requests[wanted] = IamRequest(principal, wanted, on, call=decision.describe())
        for required in REQUIRED[wanted]:
            needed = RESOURCE_KIND[required]
            if needed == "cluster":
                ask(required, arns.cluster)
            elif needed == RESOURCE_KIND[wanted]:
                ask(required, on)
            else:
                elsewhere.append((required, wanted))

    ask(action, resource)
    ask(CONNECT, arns.cluster)
    return list(requests.values()), elsewhere, None


def kafka_requests(
    log_lines: Iterable[str], cluster_arn: str, names: KafkaNames
) -> Iterator[IamRequest | KafkaUnmapped]:
    """The IAM requests of the pipeline principals' Kafka decisions in ``log_lines`` (the broker's authorizer log,
    ``authorizer_lines``) on the deployed cluster ``cluster_arn`` (environments.yaml ``msk_cluster_arn``), each
    distinct decision once; a ``KafkaUnmapped`` for each line that is no decision, each decision of a pipeline
    principal the table does not cover, and each required action no request of the principal names."""
    arns = ClusterArns(cluster_arn)
    seen: set[tuple[str, str, str, str, str, str]] = set()
    asked: dict[str, set[str]] = {}
    needs: dict[tuple[Principal, str], tuple[str, str]] = {}
    for line in log_lines:
        if not line.strip():
            continue
        decision = parse_decision(line)
        if decision is None:
            yield KafkaUnmapped("?", line.strip()[:300], "not an authorizer decision (kafka.authorizer.logger)")
            continue
        principal = pipeline_principal(decision.principal)
        key = (
            decision.principal,
            decision.operation,
            decision.resource_type,
            decision.pattern_type,
            decision.name,
            decision.api,
        )
        if principal is None or key in seen:
            continue
        seen.add(key)
        requests, elsewhere, reason = decision_requests(decision, principal, arns, names)
        if reason is not None:
            yield KafkaUnmapped(principal, decision.describe(), reason)
            continue
        asked.setdefault(principal, set()).update(r.action for r in requests)
        for required, by in elsewhere:
            needs.setdefault((principal, required), (by, decision.describe()))
        yield from requests
    for (principal, required), (by, call) in needs.items():
        if required not in asked.get(principal, set()):
            yield KafkaUnmapped(
                principal,
                call,
                f"AWS's table requires {required} with {by}, on a {RESOURCE_KIND[required]} this request does not "
                f"name, and no request of the {principal}'s asks for {required} on any",
            )


def authorizer_lines(log: Path) -> Iterator[str]:
    """The lines of the broker's authorizer log and of its rolled-over files (``<log>.1``, ``<log>.2``... of
    log4j's RollingFileAppender), oldest first."""
    numbered = {int(p.suffix[1:]): p for p in log.parent.glob(f"{log.name}.*") if p.suffix[1:].isdigit()}
    for path in [*(numbered[n] for n in sorted(numbered, reverse=True)), log]:
        if path.exists():
            with path.open(encoding="utf-8", errors="replace") as lines:
                yield from lines
