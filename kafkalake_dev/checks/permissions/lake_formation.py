"""Lake Formation, modelled: what each Glue call needs in Lake Formation terms, decided against the grants a
synthesized template creates and the LF-tags the maintainer assigns to the tables it creates or meets.

The databases give tables created at run time no ``IAMAllowedPrincipals`` grant (``CreateTableDefaultPermissions:
[]``), so Lake Formation, not IAM alone, decides every call on them; no tool evaluates Lake Formation offline, hence
this module. Each rule cites the AWS reference it follows (``RULES``); where the reference is silent (the partition
APIs, the database a table call needs to see) the rule says ``assumption`` and what it assumes, conservatively (a
stricter answer than AWS may give, never a looser one). The same model gives the consumers' effective access
(``selectable``), which ``kafkalake access`` must equal.

Only what the stacks use is read from the template: ``AWS::LakeFormation::PrincipalPermissions`` (by name, by
wildcard, by LF-tag expression, on a data location, on an LF-tag), ``TagAssociation``, ``Resource`` (registered
locations), ``DataLakeSettings`` (administrators) and the databases' ``CreateTableDefaultPermissions``.

Past 400 lines: the rules (``RULES``, each with its reference), the template's grants read into ``LakeFormation`` and
the decisions made over them are one model; split, each part would import the others' types and none be read alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafkalake.lftags import TAG_VALUES, column_tags, table_tags
from kafkalake.permissions import Expression, TableTags, matches
from kafkalake_dev.checks.permissions.requests import DEPLOYED, Deployment, GlueCall

REFERENCE: Final = "https://docs.aws.amazon.com/lake-formation/latest/dg/lf-permissions-reference.html"
IMPLICIT: Final = "https://docs.aws.amazon.com/lake-formation/latest/dg/implicit-permissions.html"
TAGGING: Final = "https://docs.aws.amazon.com/lake-formation/latest/dg/TBAC-assigning-tags.html"
CRAWLERS: Final = "https://docs.aws.amazon.com/glue/latest/dg/crawler-lf-integ.html"
GET_APIS: Final = "https://docs.aws.amazon.com/lake-formation/latest/dg/resource-links-glue-apis.html"

ALL, ALTER, DESCRIBE, CREATE_TABLE, SELECT = "ALL", "ALTER", "DESCRIBE", "CREATE_TABLE", "SELECT"
DATA_LOCATION_ACCESS, ASSOCIATE = "DATA_LOCATION_ACCESS", "ASSOCIATE"
TAGGER_GRANTABLE: Final = frozenset({"DESCRIBE", "ALTER", "DROP", "INSERT", "SELECT", "DELETE"})
"""What a principal that did not create a table must hold *with the grant option* to tag it (``TAGGING``)."""
IAM_ALLOWED_PRINCIPALS: Final = "IAM_ALLOWED_PRINCIPALS"

ROLES: Final[Mapping[str, str]] = {
    "archiver": "JobsArchiverJobRole",
    "compactor": "JobsCompactorJobRole",
    "erasure": "JobsErasureJobRole",
    "maintainer": "MaintainerRole",
    "reconciler": "ReconcilerRole",
    "crawler": "CatalogCrawlerRole",
}
"""A role of the template by the name the recording gives its principal (and ``crawler``: the role the crawlers a
``StartCrawler`` starts run as), as the start of its logical id (CDK appends an 8-digit hash of the path)."""


@dataclass(frozen=True)
class Rule:
    """What one Glue operation needs of its caller in Lake Formation."""

    database: str | None = None
    """The permission needed on the call's database (DESCRIBE: any permission on it will do)."""
    table: str | None = None
    """The permission needed on the call's table (DESCRIBE: any permission on it will do)."""
    location: bool = False
    """DATA_LOCATION_ACCESS on the location the call points at, when that location is registered."""
    tagging: bool = False
    """ASSOCIATE on the LF-tags assigned, and the table created by the caller or ``TAGGER_GRANTABLE`` grantable."""
    crawler: bool = False
    """The need is the crawler role's (the crawler the call starts creates and updates the tables), not the caller's."""
    source: str = ""
    """The AWS reference, quoted."""
    assumption: str = ""
    """What is assumed where the reference is silent (empty: all documented)."""

    def cites(self) -> str:
        return f"{self.source}; assumption: {self.assumption}" if self.assumption else self.source


SEES_DATABASE = (
    "a call on a table needs DESCRIBE on its database (any permission on the database implies it); the reference "
    "maps table APIs to table permissions only, and says table creators 'can view the database' "
    f"({IMPLICIT}), so the database is assumed to need a grant of its own"
)
PARTITION_READ = "partition reads need what GetTable needs: any permission on the table (DESCRIBE)"
PARTITION_WRITE = (
    "partition writes alter the table's metadata: ALTER on the table, and data location permission on the "
    "partition's location when it is registered, as for a table's"
)
DESCRIBE_TABLE = f"{REFERENCE}: DESCRIBE on a TABLE, 'Grantee also needs glue:GetTable'"
ALTER_TABLE = (
    f"{REFERENCE}: ALTER 'can alter metadata for a database or table... If the property that is being altered is "
    "a registered Amazon S3 location, the principal must have data location permissions on the new location'"
)
RULES: Final[Mapping[str, Rule]] = {
    "GetDatabase": Rule(database=DESCRIBE, source=f"{REFERENCE}: DESCRIBE on a DATABASE, 'glue:GetDatabase'"),
    "GetTable": Rule(database=DESCRIBE, table=DESCRIBE, source=DESCRIBE_TABLE, assumption=SEES_DATABASE),
    "GetTables": Rule(
        database=DESCRIBE,
        table=DESCRIBE,
        source=f"{GET_APIS}: 'For all Get* API operations, only databases and tables that the caller has "
        "permissions on get returned' (the call does not fail: the table is missing from its answer)",
    ),
    "CreateTable": Rule(
        database=CREATE_TABLE,
        location=True,
        source=f"{REFERENCE}: CREATE_TABLE on a DATABASE, 'glue:CreateTable'; DATA_LOCATION_ACCESS: 'can create a "
        "metadata database or table that points to the specified Amazon S3 location. The location must be "
        "registered' (the databases have no location of their own, so no exception applies)",
    ),
    "UpdateTable": Rule(database=DESCRIBE, table=ALTER, location=True, source=ALTER_TABLE, assumption=SEES_DATABASE),
    **{
        operation: Rule(
            database=DESCRIBE, table=DESCRIBE, source=DESCRIBE_TABLE, assumption=f"{SEES_DATABASE}; {PARTITION_READ}"
        )
        for operation in ("GetPartition", "GetPartitions", "BatchGetPartition")
    },
    **{
        operation: Rule(
            database=DESCRIBE,
            table=ALTER,
            location=True,
            source=ALTER_TABLE,
            assumption=f"{SEES_DATABASE}; {PARTITION_WRITE}",
        )
        for operation in ("CreatePartition", "BatchCreatePartition", "UpdatePartition", "BatchUpdatePartition")
    },
    "AddLFTagsToResource": Rule(
        database=DESCRIBE,
        tagging=True,
        source=f"{TAGGING}: 'Have the Lake Formation ASSOCIATE permission on the LF-Tag... Be the resource owner "
        "(creator), have the Super Lake Formation permission on the resource with the GRANT option, or have the "
        "following permissions with the GRANT option... For tables (and columns): DESCRIBE, ALTER, DROP, INSERT, "
        "SELECT, and DELETE'",
        assumption=SEES_DATABASE,
    ),
    "StartCrawler": Rule(
        database=CREATE_TABLE,
        location=True,
        crawler=True,
        source=f"{CRAWLERS}: the crawler role needs data location permission and Create (CREATE_TABLE) on the "
        "output database",
    ),
}
"""Per Glue operation the pipeline calls, what Lake Formation requires. The implicit permissions on top
(``IMPLICIT``): a table's creator holds everything on it ('Have all permissions on tables that they create'), a
data lake administrator DESCRIBE everywhere and data location permission everywhere; and ``REFERENCE``: 'If a user
has other Lake Formation permissions on a database, table, or resource link, DESCRIBE is implicitly granted'."""


@dataclass(frozen=True)
class LakeFormationFinding:
    """A call Lake Formation would refuse (or, for GetTables, answer without the table)."""

    principal: str
    operation: str
    database: str
    table: str | None
    missing: str
    rule: str

    def __str__(self) -> str:
        where = f"{self.database}.{self.table}" if self.table else self.database
        return f"{self.principal}: {self.operation} on {where} needs {self.missing} ({self.rule})"


@dataclass(frozen=True)
class NamedGrant:
    """Permissions on a database (``table`` None, ``wildcard`` False) or on its tables (one, or every one)."""

    principal: str
    database: str
    table: str | None
    wildcard: bool
    permissions: frozenset[str]
    grantable: frozenset[str]


@dataclass(frozen=True)
class TagPolicyGrant:
    principal: str
    resource_type: str
    expression: Expression
    permissions: frozenset[str]


@dataclass
class LakeFormation:
    """The Lake Formation state one template deploys, with the tags the maintainer assigns to the catalog's
    tables (``tables``), and the questions the rules ask of it."""

    named: list[NamedGrant] = field(default_factory=list)
    tag_policies: list[TagPolicyGrant] = field(default_factory=list)
    locations: dict[str, list[str]] = field(default_factory=dict)
    """Principal → the location ARNs it holds DATA_LOCATION_ACCESS on."""
    associate: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    """Principal → LF-tag key → the values it may associate."""
    registered: list[str] = field(default_factory=list)
    admins: set[str] = field(default_factory=set)
    open_databases: set[str] = field(default_factory=set)
    """Databases whose new tables give ``IAM_ALLOWED_PRINCIPALS`` ALL (IAM alone decides on them)."""
    database_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    tables: dict[tuple[str, str], TableTags] = field(default_factory=dict)

    def table_tags(self, database: str, table: str) -> dict[str, str]:
        """A table's effective tags: its own (once the maintainer tagged it) over its database's."""
        tagged = self.tables.get((database, table))
        return {**self.database_tags.get(database, {}), **(tagged.tags() if tagged else {})}

    def column_tags(self, database: str, table: str, column: str) -> dict[str, str]:
        tagged = self.tables.get((database, table))
        own = column_tags() if tagged and column in tagged.personal_columns else {}
        return {**self.table_tags(database, table), **own}

    def on_database(self, principal: str, database: str) -> frozenset[str]:
        named = {
            p
            for g in self.named
            if g.principal == principal and g.database == database and g.table is None and not g.wildcard
            for p in g.permissions
        }
        by_tag = {
            p
            for g in self._policies(principal, "DATABASE", self.database_tags.get(database, {}))
            for p in g.permissions
        }
        return frozenset(named | by_tag | ({DESCRIBE} if principal in self.admins else set()))

    def on_table(
        self, principal: str, database: str, table: str, *, created: bool
    ) -> tuple[frozenset[str], frozenset[str]]:
        """(permissions, grantable) of ``principal`` on a table; ``created`` when it created the table."""
        grants = self._named_on_table(principal, database, table)
        permissions = {p for g in grants for p in g.permissions} | self._open(database)
        permissions |= {
            p for g in self._policies(principal, "TABLE", self.table_tags(database, table)) for p in g.permissions
        }
        if created:
            permissions.add(ALL)
        if principal in self.admins:
            permissions.add(DESCRIBE)
        return frozenset(permissions), frozenset({ALL} if created else {p for g in grants for p in g.grantable})

    def may_locate(self, principal: str, location: str) -> bool:
        return principal in self.admins or any(covers(arn, location) for arn in self.locations.get(principal, []))

    def is_registered(self, location: str) -> bool:
        return any(covers(arn, location) for arn in self.registered)

    def selectable(self, principal: str, table: TableTags) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(readable, hidden) columns of a catalog table for a consumer, both empty when it reads none: SELECT on
        the whole table by name, or on a column by a TABLE grant whose expression the column's tags match."""
        whole = {p for g in self._named_on_table(principal, table.database, table.table) for p in g.permissions}
        whole |= self._open(table.database)

        def reads(column: str) -> bool:
            tags = self.column_tags(table.database, table.table, column)
            return holds(frozenset(whole), SELECT) or any(
                SELECT in g.permissions for g in self._policies(principal, "TABLE", tags)
            )

        readable = tuple(column for column in table.columns if reads(column))
        hidden = tuple(column for column in table.columns if column not in readable)
        return (readable, hidden) if readable else ((), ())

    def _named_on_table(self, principal: str, database: str, table: str) -> list[NamedGrant]:
        return [
            g
            for g in self.named
            if g.principal == principal and g.database == database and (g.wildcard or g.table == table)
        ]

    def _open(self, database: str) -> set[str]:
        """ALL for everyone on the tables of a database whose new tables IAM alone decides on."""
        return {ALL} if database in self.open_databases else set()

    def _policies(self, principal: str, resource_type: str, tags: Mapping[str, str]) -> list[TagPolicyGrant]:
        return [
            g
            for g in self.tag_policies
            if g.principal == principal and g.resource_type == resource_type and matches(g.expression, tags)
        ]


def holds(permissions: frozenset[str], needed: str) -> bool:
    """ALL (Super) holds everything; DESCRIBE is implied by any permission (``REFERENCE``)."""
    return ALL in permissions or needed in permissions or (needed == DESCRIBE and bool(permissions))


def covers(registered: str, location: str) -> bool:
    """A location permission (or registration) on ``registered`` covers its child locations (``REFERENCE``:
    DATA_LOCATION_ACCESS 'also has location permissions on child locations')."""
    return location == registered or location.startswith(registered.rstrip("/") + "/")


def location_arn(location: str) -> str:
    """``s3://bucket/key`` as the ARN Lake Formation registers and grants on."""
    return "arn:aws:s3:::" + location.removeprefix("s3://").rstrip("/")


def lake_formation_of(
    template: Mapping[str, Any], tables: Iterable[TableTags], where: Deployment = DEPLOYED
) -> LakeFormation:
    """The Lake Formation state ``template`` (a synthesized template's JSON) deploys, with ``tables``' tags as the
    maintainer assigns them (``kafkalake.permissions.access_model(...).tables``)."""
    resources: Mapping[str, Any] = template["Resources"]
    template_roles = {
        logical_id: name
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::IAM::Role"
        for name, path in ROLES.items()
        if re.fullmatch(rf"{path}[0-9A-F]{{8}}", logical_id)
    }
    lake = LakeFormation(tables={(t.database, t.table): t for t in tables})
    resolve = _Resolver(resources, template_roles, where)
    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::Glue::Database":
            defaults = props["DatabaseInput"].get("CreateTableDefaultPermissions")
            if defaults is None or any(
                d["Principal"]["DataLakePrincipalIdentifier"] == IAM_ALLOWED_PRINCIPALS and ALL in d["Permissions"]
                for d in defaults
            ):
                lake.open_databases.add(props["DatabaseInput"]["Name"])
        elif kind == "AWS::LakeFormation::DataLakeSettings":
            lake.admins |= {resolve.principal(a["DataLakePrincipalIdentifier"]) for a in props.get("Admins", [])}
        elif kind == "AWS::LakeFormation::Resource":
            lake.registered.append(resolve(props["ResourceArn"]))
        elif kind == "AWS::LakeFormation::TagAssociation":
            database = props["Resource"]["Database"]["Name"]
            for pair in props["LFTags"]:
                lake.database_tags.setdefault(database, {})[pair["TagKey"]] = pair["TagValues"][0]
        elif kind == "AWS::LakeFormation::PrincipalPermissions":
            _add_grant(lake, logical_id, props, resolve)
    return lake


class _Resolver:
    """The few intrinsics the Lake Formation resources use, in the deployed environment's terms."""

    def __init__(self, resources: Mapping[str, Any], roles: Mapping[str, str], where: Deployment) -> None:
        self.resources, self.roles, self.where = resources, roles, where

    def __call__(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if "Ref" in value:
            pseudo = {"AWS::AccountId": self.where.account, "AWS::Partition": self.where.partition}
            return pseudo.get(value["Ref"], self.where.region)
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return str(separator).join(self(part) for part in parts)
        logical_id, attribute = value["Fn::GetAtt"]
        resource = self.resources[logical_id]
        if resource["Type"] != "AWS::S3::Bucket" or attribute != "Arn":
            raise ValueError(f"{value} is not modelled: only a bucket's ARN names a location (lake_formation.py)")
        return f"arn:{self.where.partition}:s3:::{resource['Properties']['BucketName']}"

    def principal(self, value: Any) -> str:
        """A role of the template by its principal name (``ROLES``), any other by its ARN."""
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            logical_id = value["Fn::GetAtt"][0]
            return self.roles.get(logical_id, logical_id)
        return self(value)


def _add_grant(lake: LakeFormation, logical_id: str, props: Mapping[str, Any], resolve: _Resolver) -> None:
    principal = resolve.principal(props["Principal"]["DataLakePrincipalIdentifier"])
    permissions = frozenset(props["Permissions"])
    grantable = frozenset(props.get("PermissionsWithGrantOption", []))
    resource = props["Resource"]
    if "Database" in resource:
        lake.named.append(NamedGrant(principal, resource["Database"]["Name"], None, False, permissions, grantable))
    elif "Table" in resource:
        table = resource["Table"]
        wildcard = "TableWildcard" in table
        lake.named.append(
            NamedGrant(principal, table["DatabaseName"], table.get("Name"), wildcard, permissions, grantable)
        )
    elif "DataLocation" in resource:
        lake.locations.setdefault(principal, []).append(resolve(resource["DataLocation"]["ResourceArn"]))
    elif "LFTag" in resource:
        tag = resource["LFTag"]
        lake.associate.setdefault(principal, {}).setdefault(tag["TagKey"], set()).update(tag["TagValues"])
    elif "LFTagPolicy" in resource:
        policy = resource["LFTagPolicy"]
        expression = {e["TagKey"]: tuple(e["TagValues"]) for e in policy["Expression"]}
        lake.tag_policies.append(TagPolicyGrant(principal, policy["ResourceType"], expression, permissions))
    else:
        raise ValueError(f"{logical_id}: a grant on {sorted(resource)} is not modelled (lake_formation.py)")


def assigned_tags(lake: LakeFormation, database: str, table: str) -> dict[str, set[str]]:
    """The LF-tags the maintainer assigns to a table and its personal columns (``lambdas.maintainer``): the
    catalog's when the table is in it, else every value it might."""
    tagged = lake.tables.get((database, table))
    if tagged is None:
        return {key: set(values) for key, values in TAG_VALUES.items()}
    assigned: dict[str, set[str]] = {}
    for tags in (table_tags(tagged.sensitivity), column_tags() if tagged.personal_columns else {}):
        for key, value in tags.items():
            assigned.setdefault(key, set()).add(value)
    return assigned


def missing_permissions(lake: LakeFormation, call: GlueCall, created: set[tuple[str, str, str]]) -> list[str]:
    """What ``call`` needs and does not hold, given the tables created so far (principal, database, table)."""
    rule = RULES.get(call.operation)
    if rule is None:
        return [f"a rule: {call.operation} is not modelled (lake_formation.RULES)"]
    principal = "crawler" if rule.crawler else call.principal
    owns = call.table is not None and (principal, call.database, call.table) in created
    missing: list[str] = []
    if rule.database and not owns and not holds(lake.on_database(principal, call.database), rule.database):
        missing.append(f"{rule.database} on database {call.database}")
    if call.table is not None and (rule.table or rule.tagging):
        permissions, grantable = lake.on_table(principal, call.database, call.table, created=owns)
        if rule.table and not holds(permissions, rule.table):
            missing.append(f"{rule.table} on table {call.database}.{call.table}")
        if rule.tagging and not (ALL in grantable or grantable >= TAGGER_GRANTABLE):
            missing.append(
                f"{', '.join(sorted(TAGGER_GRANTABLE))} with the grant option on {call.database}.{call.table}"
            )
        for key, values in assigned_tags(lake, call.database, call.table).items() if rule.tagging else ():
            lacking = values - lake.associate.get(principal, {}).get(key, set())
            if lacking:
                missing.append(f"{ASSOCIATE} on LF-tag {key}={'|'.join(sorted(lacking))}")
    if rule.location and call.location:
        arn = location_arn(call.location)
        if lake.is_registered(arn) and not lake.may_locate(principal, arn):
            missing.append(f"{DATA_LOCATION_ACCESS} on {arn}")
    return missing


def evaluate_lake_formation(
    calls: Iterable[GlueCall], template: Mapping[str, Any], tables: Iterable[TableTags], where: Deployment = DEPLOYED
) -> list[LakeFormationFinding]:
    """Every permission the recorded ``calls`` need (in order: a CreateTable that succeeds makes its caller the
    table's creator for the later calls) and the template does not grant, once per principal, call and missing
    permission."""
    lake = lake_formation_of(template, tables, where)
    created: set[tuple[str, str, str]] = set()
    findings: dict[LakeFormationFinding, None] = {}
    for call in calls:
        missing = missing_permissions(lake, call, created)
        rule = RULES.get(call.operation)
        principal = f"crawler (started by {call.principal})" if rule and rule.crawler else call.principal
        for what in missing:
            finding = LakeFormationFinding(
                principal, call.operation, call.database, call.table, what, rule.cites() if rule else ""
            )
            findings[finding] = None
        if call.operation == "CreateTable" and call.table is not None and not missing:
            created.add((call.principal, call.database, call.table))
    return list(findings)


def consumer_access(
    template: Mapping[str, Any], tables: Iterable[TableTags], where: Deployment = DEPLOYED
) -> dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]]:
    """Per principal granted by LF-tag expression (the consumers), per catalog table: the (readable, hidden)
    columns, as Lake Formation decides them from the template's grants and the tags the maintainer assigns."""
    listed = list(tables)
    lake = lake_formation_of(template, listed, where)
    consumers = dict.fromkeys(g.principal for g in lake.tag_policies)
    return {consumer: {t.name: lake.selectable(consumer, t) for t in listed} for consumer in consumers}
