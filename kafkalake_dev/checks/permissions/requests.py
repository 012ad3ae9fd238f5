"""What the permission check evaluates: one IAM request (principal, action, resource, condition keys) or one Glue
call seen by Lake Formation, in the terms of a *deployed* environment, not the local stack's.

The recording sees the local stack (bucket ``kafkalake-local-lake``, test environments ``test<hex>``, moto's key ids);
the mapping writes every request as if the same call were made in the deployed ``DEPLOYED`` environment, so the
evaluators compare it with the synthesized template of that environment as is: its bucket, the account and region
below, and symbolic names for the keys and secrets the template creates (``key_arn``, ``secret_arn``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final, Literal

Principal = Literal["archiver", "compactor", "erasure", "maintainer", "reconciler"]
PRINCIPALS: Final[tuple[Principal, ...]] = ("archiver", "compactor", "erasure", "maintainer", "reconciler")
"""The pipeline's roles, by the name the recording gives them: the three jobs and the two Lambdas."""


@dataclass(frozen=True)
class Deployment:
    """The environment the recorded calls are evaluated in: the account, region and environment the templates are
    synthesized for (``cdk.out/kafkalake-<env>.template.json``) and its lake bucket."""

    env: str = "staging"
    bucket: str = "kafkalake-staging-lake"
    account: str = "111122223333"
    region: str = "eu-west-1"
    partition: str = "aws"


DEPLOYED: Final = Deployment()

KeyName = Literal["lake", "restricted", "queue"]
SecretName = Literal["pseudonym", "kafka"]


def key_arn(name: KeyName, where: Deployment = DEPLOYED) -> str:
    """A KMS key the template creates, by role: ``lake`` (LakeKey: the bucket's default encryption), ``restricted``
    (PersonalData/RestrictedKey), ``queue`` (the notifications' key). The evaluators give the template's keys these
    ARNs."""
    return f"arn:{where.partition}:kms:{where.region}:{where.account}:key/{name}"


def secret_arn(name: SecretName, where: Deployment = DEPLOYED) -> str:
    """A secret the jobs read, by role: ``pseudonym`` (the pseudonym key), ``kafka`` (Kafka credentials)."""
    return f"arn:{where.partition}:secretsmanager:{where.region}:{where.account}:secret:kafkalake/{name}"


def queue_arn(name: str, where: Deployment = DEPLOYED) -> str:
    """A queue the template creates, by its name (environments.yaml names them)."""
    return f"arn:{where.partition}:sqs:{where.region}:{where.account}:{name}"


def bus_arn(where: Deployment = DEPLOYED) -> str:
    """The environment's EventBridge bus (``kafkalake-<env>``), where the maintainer publishes completeness events."""
    return f"arn:{where.partition}:events:{where.region}:{where.account}:event-bus/kafkalake-{where.env}"


@dataclass(frozen=True)
class IamRequest:
    """One IAM authorization: ``principal`` asks for ``action`` on ``resource`` with ``context`` (condition keys, as
    the Service Authorization Reference names them). A Glue call gives one per ARN Glue requires (catalog, database,
    table); an SSE-KMS object call gives the KMS request S3 makes on the principal's behalf (``via`` = ``s3``)."""

    principal: str
    """One of ``PRINCIPALS`` for a recorded call; the denial tests also ask as the principals ``templates.py``
    resolves besides them (``location``, ``consumer:<name>``)."""
    action: str
    resource: str
    context: dict[str, str | list[str]] = field(default_factory=dict)
    call: str = ""
    """The API call it came from, e.g. ``s3.PutObject`` (for messages)."""
    via: str = ""
    """The service that asks on the principal's behalf (``kms:ViaService``), empty for the principal's own call."""

    def key(self) -> str:
        """Equal for requests that are decided alike (duplicates are evaluated once)."""
        return json.dumps([self.principal, self.action, self.resource, self.context, self.via], sort_keys=True)


@dataclass(frozen=True)
class GlueCall:
    """One Glue Data Catalog call as Lake Formation sees it: the operation on a database (and table)."""

    principal: Principal
    operation: str
    """The API operation, e.g. ``GetPartitions``, ``BatchCreatePartition``, ``CreateTable``."""
    database: str
    table: str | None = None
    location: str | None = None
    """The S3 location the call points a table or partition at (``s3://bucket/key``, deployed terms), if any."""


def write_jsonl(path: Path, items: Iterable[IamRequest | GlueCall]) -> None:
    with path.open("w") as out:
        for item in items:
            out.write(json.dumps({"kind": type(item).__name__, **asdict(item)}) + "\n")


def read_jsonl(path: Path) -> Iterator[IamRequest | GlueCall]:
    for line in path.read_text().splitlines():
        record = json.loads(line)
        kind = record.pop("kind")
        yield IamRequest(**record) if kind == "IamRequest" else GlueCall(**record)
