"""Access by sensitivity, in Lake Formation (``kafkalake.permissions`` says what; this construct creates it).

- The LF-tags ``sensitivity`` and ``pii`` and their association with every database the stacks create. Tables
  are created at run time (by the crawlers and the maintainer), so the maintainer tags them and their personal
  columns (``lambdas.maintainer``); until then a table inherits its database's tags: the strictest level of its
  tables, and every column personal (``kafkalake.lftags``).
- The data prefix registered with Lake Formation, with a role that reads and writes it: Lake Formation hands
  consumers temporary credentials for it, so consumers need no S3 permission of their own.
- Per consumer role: DESCRIBE on the databases and SELECT on the tables and columns by LF-tag expression. The
  lake bucket's policy denies consumer roles reading its objects directly (IAM-only access is removed).
- The pipeline's own roles (``LakeWriter``: crawlers, maintainer, reconciler, compactor, erasure) by name on our
  databases and all their tables, since new tables get no ``IAMAllowedPrincipals`` grant (``GlueDatabases``:
  ``CreateTableDefaultPermissions`` is empty) and Lake Formation decides on them: each role what its Glue calls
  need (``kafkalake_dev.checks.permissions.lake_formation`` states the rules; the unit tests evaluate the template
  against them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import CfnResource, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lakeformation as lf
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.glue_databases import GlueDatabases
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentConfig
from kafkalake.layout import DATA_ROOT
from kafkalake.lftags import TAG_VALUES
from kafkalake.permissions import Expression, access_model
from kafkalake.topic_catalog import Topic

CONSUMER_TABLE_PERMISSIONS = ("SELECT", "DESCRIBE")


@dataclass(frozen=True)
class LakeWriter:
    """A pipeline role and the Lake Formation permissions its Glue calls need, on each of our databases and on
    every table in them (created at run time, by another role as often as not)."""

    role: iam.IRole
    database: tuple[str, ...]
    tables: tuple[str, ...]
    tables_grantable: tuple[str, ...] = ()
    """Granted with the grant option too: Lake Formation lets only a table's creator, or a holder of these with
    the grant option, tag it."""
    locates: bool = False
    """DATA_LOCATION_ACCESS on the registered data prefix: it creates tables or points partitions there."""
    tags: bool = False
    """ASSOCIATE on the LF-tags: it tags the tables it creates or meets (``lambdas.maintainer``)."""
    databases: frozenset[str] | None = None
    """The databases it acts in; None: every one of ours."""


class LakeAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        topics: list[Topic],
        glue_databases: GlueDatabases,
        bucket: s3.IBucket,
        key: kms.IKey,
        writers: Mapping[str, LakeWriter],
    ) -> None:
        super().__init__(scope, construct_id)
        self.catalog_id = Stack.of(self).account
        self.model = access_model(settings, topics)
        self.tags = [
            lf.CfnTag(self, f"Tag-{tag_key}", catalog_id=self.catalog_id, tag_key=tag_key, tag_values=list(values))
            for tag_key, values in TAG_VALUES.items()
        ]
        self.associations = [self._tag_database(glue_databases, database) for database in self.model.databases]
        self.location = self._register(bucket, key)
        self.grants = [
            self._grant(grant.consumer.name, grant.consumer.role_arn, resource_type, expression, permissions)
            for grant in self.model.grants
            for resource_type, expression, permissions in (
                ("DATABASE", grant.database_expression, ("DESCRIBE",)),
                ("TABLE", grant.table_expression, CONSUMER_TABLE_PERMISSIONS),
            )
        ]
        for name, writer in writers.items():
            self._writer(name, writer, glue_databases)
        self._deny_direct_reads(bucket, [c.consumer.role_arn for c in self.model.grants])

    def _depends_on_tags(self, resource: CfnResource) -> None:
        for tag in self.tags:
            resource.add_resource_dependency(tag)

    def _tag_database(self, glue_databases: GlueDatabases, database: str) -> lf.CfnTagAssociation:
        association = lf.CfnTagAssociation(
            self,
            f"Tags-{database}",
            resource=lf.CfnTagAssociation.ResourceProperty(
                database=lf.CfnTagAssociation.DatabaseResourceProperty(catalog_id=self.catalog_id, name=database)
            ),
            lf_tags=[
                lf.CfnTagAssociation.LFTagPairProperty(catalog_id=self.catalog_id, tag_key=k, tag_values=[v])
                for k, v in sorted(self.model.databases[database].items())
            ],
        )
        self._depends_on_tags(association)
        association.add_resource_dependency(glue_databases.database_resources[database])
        return association

    def _register(self, bucket: s3.IBucket, key: kms.IKey) -> lf.CfnResource:
        """The data prefix, registered with a role Lake Formation assumes to read and write it for the principals
        it authorises (never the service-linked role: its access to the lake key cannot be scoped here)."""
        stack = Stack.of(self)
        role = iam.Role(
            self,
            "LocationRole",
            assumed_by=iam.ServicePrincipal(
                "lakeformation.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
            description="Lake Formation reads and writes the lake's data prefix for the principals it authorises",
        )
        prefix = f"{DATA_ROOT}/*"
        statements = [
            (["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], [bucket.arn_for_objects(prefix)]),
            (["s3:ListBucket"], [bucket.bucket_arn]),
            (["kms:Decrypt", "kms:GenerateDataKey"], [key.key_arn]),
        ]
        for actions, resources in statements:
            role.add_to_policy(iam.PolicyStatement(actions=actions, resources=resources))
        lake_id = stack.resolve(bucket.bucket_arn)["Fn::GetAtt"][0]
        acknowledge(
            role,
            "Lake Formation reads and writes every object under the data prefix it governs (tables are created at "
            "run time, each under its own prefix).",
            f"AwsSolutions-IAM5[Resource::<{lake_id}.Arn>/{prefix}]",
        )
        return lf.CfnResource(
            self,
            "DataLocation",
            resource_arn=f"{bucket.bucket_arn}/{DATA_ROOT}",
            use_service_linked_role=False,
            role_arn=role.role_arn,
        )

    def _principal_permissions(
        self,
        construct_id: str,
        principal: str,
        resource: lf.CfnPrincipalPermissions.ResourceProperty,
        permissions: Sequence[str],
        grantable: Sequence[str] = (),
    ) -> lf.CfnPrincipalPermissions:
        return lf.CfnPrincipalPermissions(
            self,
            construct_id,
            principal=lf.CfnPrincipalPermissions.DataLakePrincipalProperty(data_lake_principal_identifier=principal),
            resource=resource,
            permissions=list(permissions),
            permissions_with_grant_option=list(grantable),
        )

    def _grant(
        self, name: str, role_arn: str, resource_type: str, expression: Expression, permissions: Sequence[str]
    ) -> lf.CfnPrincipalPermissions:
        """One consumer's grant on the databases or tables its expression matches."""
        policy = lf.CfnPrincipalPermissions.LFTagPolicyResourceProperty(
            catalog_id=self.catalog_id,
            resource_type=resource_type,
            expression=[
                lf.CfnPrincipalPermissions.LFTagProperty(tag_key=k, tag_values=list(v)) for k, v in expression.items()
            ],
        )
        resource = lf.CfnPrincipalPermissions.ResourceProperty(lf_tag_policy=policy)
        grant = self._principal_permissions(f"Grant-{name}-{resource_type}", role_arn, resource, permissions)
        self._depends_on_tags(grant)
        for association in self.associations:
            grant.add_resource_dependency(association)
        return grant

    def _writer(self, name: str, writer: LakeWriter, glue_databases: GlueDatabases) -> None:
        """A pipeline role: its databases, every table in them, the data location and the LF-tags, as it needs."""
        resource = lf.CfnPrincipalPermissions.ResourceProperty
        role_arn = writer.role.role_arn
        for database, cfn_database in glue_databases.database_resources.items():
            if writer.databases is not None and database not in writer.databases:
                continue
            on_database = resource(
                database=lf.CfnPrincipalPermissions.DatabaseResourceProperty(catalog_id=self.catalog_id, name=database)
            )
            on_tables = resource(
                table=lf.CfnPrincipalPermissions.TableResourceProperty(
                    catalog_id=self.catalog_id, database_name=database, table_wildcard={}
                )
            )
            for suffix, target, permissions, grantable in (
                ("Database", on_database, writer.database, ()),
                ("Tables", on_tables, writer.tables, writer.tables_grantable),
            ):
                if not permissions and not grantable:  # e.g. a role that only creates its tables: it holds them
                    continue
                grant = self._principal_permissions(
                    f"{name}-{database}-{suffix}", role_arn, target, permissions, grantable
                )
                grant.add_resource_dependency(cfn_database)
        if writer.locates:
            location = resource(
                data_location=lf.CfnPrincipalPermissions.DataLocationResourceProperty(
                    catalog_id=self.catalog_id, resource_arn=self.location.resource_arn
                )
            )
            grant = self._principal_permissions(f"{name}-DataLocation", role_arn, location, ["DATA_LOCATION_ACCESS"])
            grant.add_resource_dependency(self.location)
        if writer.tags:
            for tag_key, values in TAG_VALUES.items():
                tag = resource(
                    lf_tag=lf.CfnPrincipalPermissions.LFTagKeyResourceProperty(
                        catalog_id=self.catalog_id, tag_key=tag_key, tag_values=list(values)
                    )
                )
                grant = self._principal_permissions(f"{name}-Associate-{tag_key}", role_arn, tag, ["ASSOCIATE"])
                self._depends_on_tags(grant)

    def _deny_direct_reads(self, bucket: s3.IBucket, consumer_roles: list[str]) -> None:
        """Consumers read through Lake Formation's credentials only: a grant in their own account's policies
        cannot reach the lake's objects."""
        if not consumer_roles:
            return
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ConsumersReadThroughLakeFormationOnly",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket", "s3:ListBucketVersions"],
                resources=[bucket.bucket_arn, bucket.arn_for_objects("*")],
                conditions={"ArnEquals": {"aws:PrincipalArn": consumer_roles}},
            )
        )
