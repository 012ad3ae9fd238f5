"""The archiver's MSK IAM grants at the seed's fleet size (160 topics in one environment), synthesized as ``cdk
deploy`` does (cdk.json's context, so CDK's policy minimising): every exact topic and group ARN is granted, and every
policy document on the archiver's role stays within IAM's sizes (an inline policy 10,240 characters, a managed one
6,144; whitespace is not counted, and the template's form, with unresolved ARNs of other resources, is longer than
what IAM stores) and the role within the 10 managed policies IAM attaches by default. One statement of all the topics'
ARNs would be a managed policy of ~26,000 characters, which IAM refuses at deployment."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from aws_cdk import App
from aws_cdk.assertions import Template

from infra.app import build
from infra.msk import archiver_resources
from infra.repo import REPO_ROOT
from kafkalake.topic_catalog import TopicCatalog
from tests.unit.cdk_templates import CATALOG, ENVIRONMENTS, kafka_grants, role_policies

FLEET = 160
INLINE_CHARACTERS, MANAGED_CHARACTERS, MANAGED_PER_ROLE = 10_240, 6_144, 10
"""IAM's quotas (IAM User Guide, "IAM and AWS STS quotas"): a role's inline policies together, one managed policy,
managed policies attached to a role (adjustable up to 20)."""


def fleet_catalog(size: int) -> TopicCatalog:
    """The staging catalog's topics copied until there are ``size``, each copy its own name and Kafka topic."""
    staging = CATALOG.for_env("staging")
    topics = []
    for index in range(size):
        topic, copy = staging[index % len(staging)], index // len(staging)
        if copy:
            spec = topic.spec.model_copy(update={"kafka_topic": f"{topic.kafka_topic}-{copy:04d}"})
            topic = dataclasses.replace(topic, name=f"{topic.name}-{copy}", spec=spec)
        topics.append(topic)
    return TopicCatalog(CATALOG.root, tuple(topics))


def test_the_archivers_grants_for_160_msk_topics_fit_iams_policy_sizes(tmp_path: Path) -> None:
    settings = ENVIRONMENTS["staging"]
    assert settings.msk_cluster_arn is not None
    catalog = fleet_catalog(FLEET)
    app = App(context=json.loads((REPO_ROOT / "cdk.json").read_text())["context"])
    tpl = Template.from_stack(build(app, {"staging": settings}, catalog, tmp_path)["staging"])

    documents = role_policies(tpl, "ArchiverJobRole")
    sizes = [len(json.dumps(d, separators=(",", ":"))) for d in documents]
    inline, *managed = sizes  # the role's default policy comes first
    assert inline <= INLINE_CHARACTERS and all(size <= MANAGED_CHARACTERS for size in managed), sizes
    assert 0 < len(managed) <= MANAGED_PER_ROLE, sizes
    expected = archiver_resources(settings.msk_cluster_arn, [t.kafka_topic for t in catalog.topics])
    granted = kafka_grants([s for d in documents for s in d["Statement"]])
    assert granted[("kafka-cluster:DescribeTopic", "kafka-cluster:ReadData")] == set(expected.topics)
    assert granted[("kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup")] == set(expected.groups)
    assert len(expected.topics) == FLEET
