"""The permission check's Kafka part (``kafkalake_dev.checks.permissions.kafka``): the broker's authorizer decisions
mapped to the ``kafka-cluster:`` actions AWS's table gives them, on the deployed cluster's ARNs and names.

``OBSERVED`` are lines a Kafka 3.9.1 broker (StandardAuthorizer, ``allow.everyone.if.no.acl.found``, the stack's
``[%d] %p %m (%c)%n`` layout) wrote for the archiver's own code (``spark_jobs.archiver.offsets``, ``task_reader``,
``kafkalake.kafka.list_topics``) run as ``User:archiver``; ``line`` writes others by the same format string
(``StandardAuthorizerData.buildAuditMessage``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.repo import catalog_dir
from kafkalake.naming import SHARED_READ_GROUP, consumer_group
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.checks.permissions.kafka import (
    ACTIONS,
    CONNECT,
    REQUIRED,
    RESOURCE_KIND,
    ClusterArns,
    KafkaNames,
    KafkaUnmapped,
    authorizer_lines,
    kafka_requests,
    parse_decision,
)
from kafkalake_dev.checks.permissions.mapping import Unmapped
from kafkalake_dev.checks.permissions.requests import IamRequest

CLUSTER = "arn:aws:kafka:eu-west-1:111111111111:cluster/kafkalake-staging/5e1c0a9f-3b1d-4c0e-9d5a-0c7e2f4b8a61-2"
HEAD = "arn:aws:kafka:eu-west-1:111111111111"
WHERE = "kafkalake-staging/5e1c0a9f-3b1d-4c0e-9d5a-0c7e2f4b8a61-2"
DEPLOYED = "staging.acme.payments.card-authorized"
LOCAL = "test.card-authorized.0a1b2c3d"
NAMES = KafkaNames({"card-authorized": DEPLOYED, "order-placed": "staging.acme.shop.order-placed"})

OBSERVED = {
    "fetch": "[2026-11-29 01:36:27,839] DEBUG Principal = User:archiver is Allowed operation = READ from host = "
    "127.0.0.1 on resource = Topic:LITERAL:test.card-authorized.0a1b2c3d for request = Fetch with resourceRefCount = 2 "
    "based on rule DefaultAllow (kafka.authorizer.logger)",
    "list_offsets": "[2026-11-29 01:36:44,216] DEBUG Principal = User:archiver is Allowed operation = DESCRIBE from "
    "host = 127.0.0.1 on resource = Topic:LITERAL:test.card-authorized.0a1b2c3d for request = ListOffsets with "
    "resourceRefCount = 1 based on rule DefaultAllow (kafka.authorizer.logger)",
    "offset_fetch": "[2026-11-29 01:35:52,404] DEBUG Principal = User:archiver is Allowed operation = DESCRIBE from "
    "host = 127.0.0.1 on resource = Group:LITERAL:kafkalake-archiver.test.card-authorized.0a1b2c3d for request = "
    "OffsetFetch with resourceRefCount = 1 based on rule DefaultAllow (kafka.authorizer.logger)",
    "offset_commit": "[2026-11-29 01:36:21,423] DEBUG Principal = User:archiver is Allowed operation = READ from host "
    "= 127.0.0.1 on resource = Group:LITERAL:kafkalake-archiver.test.card-authorized.0a1b2c3d for request = "
    "OffsetCommit with resourceRefCount = 1 based on rule DefaultAllow (kafka.authorizer.logger)",
    "denied": "[2026-11-29 01:37:42,627] INFO Principal = User:archiver is Denied operation = DESCRIBE from host = "
    "127.0.0.1 on resource = Group:LITERAL:kafkalake-archiver.(shared) for request = FindCoordinator with "
    "resourceRefCount = 1 based on rule MatchingAcl(acl=StandardAcl(resourceType=GROUP, "
    "resourceName=kafkalake-archiver.(shared), patternType=LITERAL, principal=User:archiver, host=*, operation=ALL, "
    "permissionType=DENY)) (kafka.authorizer.logger)",
    "broker": "[2026-11-29 01:35:49,730] DEBUG Principal = User:ANONYMOUS is Allowed operation = CLUSTER_ACTION from "
    "host = 127.0.0.1 on resource = Cluster:LITERAL:kafka-cluster for request = BrokerHeartbeat with "
    "resourceRefCount = 1 based on rule SuperUser (kafka.authorizer.logger)",
}


def line(
    operation: str,
    resource: str,
    api: str,
    principal: str = "User:archiver",
    outcome: str = "Allowed",
    rule: str = "DefaultAllow",
) -> str:
    """A decision as StandardAuthorizerData.buildAuditMessage writes it, in the stack's layout."""
    level = "DEBUG" if outcome == "Allowed" else "INFO"
    return (
        f"[2026-11-29 01:26:26,965] {level} Principal = {principal} is {outcome} operation = {operation} from host = "
        f"127.0.0.1 on resource = {resource} for request = {api} with resourceRefCount = 1 based on rule {rule} "
        "(kafka.authorizer.logger)"
    )


def topic(name: str) -> str:
    return f"{HEAD}:topic/{WHERE}/{name}"


def group(name: str) -> str:
    return f"{HEAD}:group/{WHERE}/{name}"


def requests(*lines: str, names: KafkaNames = NAMES) -> set[tuple[str, str, str]]:
    """(principal, action, resource) of the mapped requests; fails on any finding."""
    mapped = list(kafka_requests(lines, CLUSTER, names))
    assert [m for m in mapped if not isinstance(m, IamRequest)] == []
    return {(r.principal, r.action, r.resource) for r in mapped if isinstance(r, IamRequest)}


def findings(*lines: str) -> list[KafkaUnmapped]:
    return [m for m in kafka_requests(lines, CLUSTER, NAMES) if isinstance(m, KafkaUnmapped)]


def test_a_decision_is_read_from_the_broker_log_line() -> None:
    decision = parse_decision(OBSERVED["fetch"])
    assert decision is not None
    assert (decision.principal, decision.allowed, decision.operation, decision.api) == (
        "User:archiver",
        True,
        "READ",
        "Fetch",
    )
    assert (decision.resource_type, decision.pattern_type, decision.name) == ("Topic", "LITERAL", LOCAL)
    assert decision.rule == "DefaultAllow"
    denied = parse_decision(OBSERVED["denied"])
    assert denied is not None
    assert not denied.allowed
    assert denied.name == SHARED_READ_GROUP
    assert denied.rule.startswith("MatchingAcl(acl=StandardAcl(resourceType=GROUP")


def test_the_zookeeper_authorizers_wording_is_read_too() -> None:
    """AclAuthorizer.logAuditMessage: ``Operation = Read`` (PascalCase), no rule."""
    acl_authorizer = (
        "Principal = User:archiver is Allowed Operation = IdempotentWrite from host = 10.0.0.1 on resource = "
        "Cluster:LITERAL:kafka-cluster for request = InitProducerId with resourceRefCount = 1"
    )
    decision = parse_decision(acl_authorizer)
    assert decision is not None
    assert (decision.operation, decision.resource_type, decision.name, decision.rule) == (
        "IDEMPOTENT_WRITE",
        "Cluster",
        "kafka-cluster",
        "",
    )


def test_a_fetch_is_read_data_on_the_deployed_topic_with_describe_topic_and_connect() -> None:
    """ReadData requires Connect and DescribeTopic (on the topic) and AlterGroup: the archiver's commit asks it."""
    assert requests(OBSERVED["fetch"], OBSERVED["offset_commit"]) >= {
        ("archiver", "kafka-cluster:ReadData", topic(DEPLOYED)),
        ("archiver", "kafka-cluster:DescribeTopic", topic(DEPLOYED)),
        ("archiver", CONNECT, CLUSTER),
    }


def test_read_data_without_any_group_request_of_the_principal_fails_the_check() -> None:
    """The table requires AlterGroup with ReadData; a Fetch names no group, so another request of the principal
    must ask for it somewhere."""
    (finding,) = findings(OBSERVED["fetch"])
    assert finding.principal == "archiver"
    assert "kafka-cluster:AlterGroup" in finding.reason
    assert "kafka.Fetch READ Topic:test.card-authorized.0a1b2c3d" in finding.message()
    assert isinstance(finding, Unmapped)  # __main__ reports every Unmapped


@pytest.mark.parametrize("api", ["Metadata", "ListOffsets", "OffsetFetch"])
def test_describing_a_topic_is_describe_topic(api: str) -> None:
    assert requests(line("DESCRIBE", f"Topic:LITERAL:{LOCAL}", api)) == {
        ("archiver", "kafka-cluster:DescribeTopic", topic(DEPLOYED)),
        ("archiver", CONNECT, CLUSTER),
    }


def test_list_offsets_as_logged() -> None:
    assert ("archiver", "kafka-cluster:DescribeTopic", topic(DEPLOYED)) in requests(OBSERVED["list_offsets"])


def test_an_offset_commit_is_alter_group_and_describe_group_on_the_topics_deployed_group() -> None:
    assert requests(OBSERVED["offset_commit"]) == {
        ("archiver", "kafka-cluster:AlterGroup", group(consumer_group(DEPLOYED))),
        ("archiver", "kafka-cluster:DescribeGroup", group(consumer_group(DEPLOYED))),
        ("archiver", CONNECT, CLUSTER),
    }


def test_an_offset_commit_reads_its_topic_too() -> None:
    commit_topic = line("READ", f"Topic:LITERAL:{LOCAL}", "OffsetCommit")
    assert ("archiver", "kafka-cluster:ReadData", topic(DEPLOYED)) in requests(commit_topic, OBSERVED["offset_commit"])


@pytest.mark.parametrize("api", ["OffsetFetch", "FindCoordinator"])
def test_describing_a_group_is_describe_group(api: str) -> None:
    assert requests(line("DESCRIBE", f"Group:LITERAL:{consumer_group(LOCAL)}", api)) == {
        ("archiver", "kafka-cluster:DescribeGroup", group(consumer_group(DEPLOYED))),
        ("archiver", CONNECT, CLUSTER),
    }
    assert ("archiver", "kafka-cluster:DescribeGroup", group(consumer_group(DEPLOYED))) in requests(
        OBSERVED["offset_fetch"]
    )


def test_a_denied_decision_is_mapped_like_an_allowed_one() -> None:
    """The local broker's ACLs are not MSK's: the deployed policy decides (the shared group keeps its name)."""
    assert requests(OBSERVED["denied"]) == {
        ("archiver", "kafka-cluster:DescribeGroup", group(SHARED_READ_GROUP)),
        ("archiver", CONNECT, CLUSTER),
    }


@pytest.mark.parametrize(
    ("operation", "resource", "action", "arn"),
    [
        ("DESCRIBE", "Cluster:LITERAL:kafka-cluster", "kafka-cluster:DescribeCluster", CLUSTER),
        ("DESCRIBE_CONFIGS", f"Topic:LITERAL:{LOCAL}", "kafka-cluster:DescribeTopicDynamicConfiguration", None),
        ("CREATE", f"Topic:LITERAL:{LOCAL}", "kafka-cluster:CreateTopic", None),
        ("WRITE", f"Topic:LITERAL:{LOCAL}", "kafka-cluster:WriteData", None),
        ("DELETE", "Group:LITERAL:other", "kafka-cluster:DeleteGroup", group("other")),
        ("DESCRIBE", "TransactionalId:LITERAL:tx-1", "kafka-cluster:DescribeTransactionalId", None),
    ],
)
def test_each_operation_is_the_action_aws_calls_equivalent(
    operation: str, resource: str, action: str, arn: str | None
) -> None:
    found = requests(line(operation, resource, "Any"))
    expected = arn or (topic(DEPLOYED) if "Topic:" in resource else f"{HEAD}:transactional-id/{WHERE}/tx-1")
    assert ("archiver", action, expected) in found


def test_required_actions_follow_on_the_same_resource_and_the_cluster() -> None:
    """AlterCluster → DescribeCluster (cluster); AlterTopicDynamicConfiguration → its Describe (topic)."""
    assert requests(line("ALTER", "Cluster:LITERAL:kafka-cluster", "AlterPartitionReassignments")) == {
        ("archiver", "kafka-cluster:AlterCluster", CLUSTER),
        ("archiver", "kafka-cluster:DescribeCluster", CLUSTER),
        ("archiver", CONNECT, CLUSTER),
    }
    assert requests(line("ALTER_CONFIGS", f"Topic:LITERAL:{LOCAL}", "IncrementalAlterConfigs")) == {
        ("archiver", "kafka-cluster:AlterTopicDynamicConfiguration", topic(DEPLOYED)),
        ("archiver", "kafka-cluster:DescribeTopicDynamicConfiguration", topic(DEPLOYED)),
        ("archiver", CONNECT, CLUSTER),
    }


def test_creating_on_the_cluster_is_create_topic_on_every_topic() -> None:
    assert ("archiver", "kafka-cluster:CreateTopic", topic("*")) in requests(
        line("CREATE", "Cluster:LITERAL:kafka-cluster", "CreateTopics")
    )


def test_an_idempotent_producer_needs_write_data_somewhere() -> None:
    idempotent = line("IDEMPOTENT_WRITE", "Cluster:LITERAL:kafka-cluster", "InitProducerId")
    (finding,) = findings(idempotent)
    assert "kafka-cluster:WriteData" in finding.reason
    assert ("archiver", "kafka-cluster:WriteDataIdempotently", CLUSTER) in requests(
        idempotent, line("WRITE", f"Topic:LITERAL:{LOCAL}", "Produce")
    )


@pytest.mark.parametrize(
    ("operation", "resource"),
    [
        ("CLUSTER_ACTION", "Cluster:LITERAL:kafka-cluster"),
        ("DESCRIBE_CONFIGS", "Group:LITERAL:g"),
        ("DESCRIBE", "DelegationToken:LITERAL:token"),
        ("CREATE_TOKENS", "User:LITERAL:User:archiver"),
    ],
)
def test_an_operation_the_table_does_not_name_is_a_finding(operation: str, resource: str) -> None:
    (finding,) = findings(line(operation, resource, "Any"))
    assert "kafka-actions.html names no action" in finding.reason


def test_a_line_that_is_no_decision_is_a_finding() -> None:
    (finding,) = findings("[2026-11-29 01:26:26,965] WARN something else (kafka.authorizer.logger)", "", "  ")
    assert finding.principal == "?"


def test_other_principals_are_ignored() -> None:
    """The broker's and the tests' own principals (plaintext, SASL, mutual TLS), whatever they do."""
    others = [
        OBSERVED["broker"],
        line("READ", f"Topic:LITERAL:{LOCAL}", "Fetch", principal="User:kafkalake"),
        line("READ", f"Topic:LITERAL:{LOCAL}", "Fetch", principal="User:CN=kafkalake"),
        line("READ", f"Topic:LITERAL:{LOCAL}", "Fetch", principal="User:admin", rule="SuperUser"),
    ]
    assert list(kafka_requests(others, CLUSTER, NAMES)) == []


def test_each_pipeline_principal_is_named_as_the_check_names_it() -> None:
    compactor = line("DESCRIBE", f"Topic:LITERAL:{LOCAL}", "Metadata", principal="User:compactor")
    assert {p for p, _, _ in requests(compactor)} == {"compactor"}


def test_a_repeated_decision_is_mapped_once() -> None:
    mapped = list(kafka_requests([OBSERVED["list_offsets"]] * 5, CLUSTER, NAMES))
    assert len(mapped) == 2


@pytest.mark.parametrize(
    ("local", "deployed"),
    [
        (DEPLOYED, DEPLOYED),
        (LOCAL, DEPLOYED),
        ("test.order-placed.ffee0011", "staging.acme.shop.order-placed"),
        ("t1a2b3c4d.acme.payments.card-authorized", DEPLOYED),
        ("test.erasure.customers_a.t1a2b3c4d", DEPLOYED),  # a test's own catalog: the catalog's first topic
        ("other.team.topic", "other.team.topic"),
        ("__consumer_offsets", "__consumer_offsets"),
    ],
)
def test_a_local_topic_is_the_deployed_topic_it_stands_for(local: str, deployed: str) -> None:
    assert NAMES.deployed_topic(local) == deployed


def test_groups_follow_their_topic_and_others_keep_their_name() -> None:
    assert NAMES.deployed_group(consumer_group(LOCAL)) == consumer_group(DEPLOYED)
    assert NAMES.deployed_group(SHARED_READ_GROUP) == SHARED_READ_GROUP
    assert NAMES.deployed_group("someone-else") == "someone-else"


def test_the_catalogs_topics_name_the_deployed_ones() -> None:
    names = KafkaNames.of(load_topic_catalog(catalog_dir()).for_env("staging"))
    assert names.deployed_topic("test.card-authorized.12345678") == DEPLOYED
    assert names.deployed_topic("test.ticket-opened.12345678") == "staging.globex.support.ticket-opened"


def test_the_arns_are_built_from_the_clusters() -> None:
    arns = ClusterArns(CLUSTER)
    assert arns.of("cluster", "kafka-cluster") == CLUSTER
    assert arns.of("topic", DEPLOYED) == topic(DEPLOYED)
    assert arns.of("transactional-id", "tx") == f"{HEAD}:transactional-id/{WHERE}/tx"
    with pytest.raises(ValueError, match="not an MSK cluster ARN"):
        ClusterArns("arn:aws:kafka:eu-west-1:111111111111:topic/kafkalake-staging/uuid/t")


def test_the_table_is_complete() -> None:
    """Every action has its required actions and resource kind; each Kafka ACL's action is granted on the kind of
    resource the ACL names (CREATE on the cluster aside: it is CreateTopic, on topics)."""
    assert set(REQUIRED) == set(RESOURCE_KIND)
    assert {a for required in REQUIRED.values() for a in required} <= set(REQUIRED)
    assert set(ACTIONS.values()) <= set(REQUIRED)
    kinds = {"Cluster": "cluster", "Topic": "topic", "Group": "group", "TransactionalId": "transactional-id"}
    mismatched = {key for key, action in ACTIONS.items() if RESOURCE_KIND[action] != kinds[key[1]]}
    assert mismatched == {("CREATE", "Cluster")}


def test_rolled_over_logs_are_read_oldest_first(tmp_path: Path) -> None:
    log = tmp_path / "kafka-authorizer.log"
    for name, text in [("kafka-authorizer.log.2", "oldest\n"), ("kafka-authorizer.log.1", "older\n")]:
        (tmp_path / name).write_text(text)
    log.write_text("newest\n")
    assert list(authorizer_lines(log)) == ["oldest\n", "older\n", "newest\n"]
    assert list(authorizer_lines(tmp_path / "missing.log")) == []
