"""Amazon MSK with IAM access control: the ARNs the archiver's role is granted Kafka actions on, built from the
cluster's ARN (``msk_cluster_arn`` in environments.yaml) as AWS documents them
(https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html#msk-iam-resources):
``arn:aws:kafka:<region>:<account>:topic/<cluster name>/<cluster uuid>/<topic>`` and likewise ``group/``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafkalake.naming import SHARED_READ_GROUP, consumer_group

CLUSTER_ACTIONS = ("kafka-cluster:Connect",)
TOPIC_ACTIONS = ("kafka-cluster:DescribeTopic", "kafka-cluster:ReadData")
GROUP_ACTIONS = ("kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup")
SHARED_GROUP_ACTIONS = ("kafka-cluster:DescribeGroup",)


class NotAClusterArn(ValueError):
    """``msk_cluster_arn`` is not an MSK cluster's ARN."""


@dataclass(frozen=True)
class ArchiverKafkaResources:
    """What the archiver reads on an MSK cluster: the cluster, its catalog topics, its topics' consumer groups, and
    the light passes' shared group, which its readers only look up (FindCoordinator: DescribeGroup; they assign
    partitions and never join or commit it)."""

    cluster: str
    topics: tuple[str, ...]
    groups: tuple[str, ...]
    shared_group: str


def archiver_resources(cluster_arn: str, kafka_topics: Iterable[str]) -> ArchiverKafkaResources:
    """The ARNs of the cluster, of each of ``kafka_topics`` and of the archiver's groups on it, in a stable order."""
    head, separator, name_and_uuid = cluster_arn.partition(":cluster/")
    if not separator or name_and_uuid.count("/") != 1:
        raise NotAClusterArn(
            f"{cluster_arn!r} is not an MSK cluster ARN (arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>)"
        )
    topics = sorted(set(kafka_topics))
    groups = sorted({consumer_group(t) for t in topics})
    return ArchiverKafkaResources(
        cluster_arn,
        tuple(f"{head}:topic/{name_and_uuid}/{t}" for t in topics),
        tuple(f"{head}:group/{name_and_uuid}/{g}" for g in groups),
        f"{head}:group/{name_and_uuid}/{SHARED_READ_GROUP}",
    )
