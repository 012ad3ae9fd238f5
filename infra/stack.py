"""One kafkalake environment, composed of its parts: storage, personal data (restricted key, pseudonym key),
notifications, Glue databases and crawlers, maintainer, jobs, monitoring, access by sensitivity (Lake Formation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Stack, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.glue_databases import GlueDatabases
from infra.constructs.iam import admit_logs
from infra.constructs.jobs import Jobs
from infra.constructs.lake_access import LakeAccess, LakeWriter
from infra.constructs.maintainer import Maintainer
from infra.constructs.monitoring import Monitoring
from infra.constructs.notifications import Notifications
from infra.constructs.personal import PersonalData
from infra.constructs.reconciler import Reconciler
from infra.constructs.storage import Storage
from kafkalake.environments import EnvironmentConfig
from kafkalake.topic_catalog import Topic


class KafkalakeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        topics: list[Topic],
        build_dir: Path,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Access logs are delivered under a bucket policy, not the legacy LogDeliveryWrite ACL.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        Tags.of(self).add("kafkalake:environment", settings.name)
        self.key = kms.Key(
            self,
            "LakeKey",
            enable_key_rotation=True,
            alias=f"alias/kafkalake-{settings.name}",
            description=f"kafkalake {settings.name}: lake bucket, Glue and Lambda logs, Lambda environment",
        )
        admit_logs(self.key)
        self.storage = Storage(self, "Storage", settings=settings, topics=topics, key=self.key)
        bucket = self.storage.bucket
        self.personal = PersonalData(self, "PersonalData", settings=settings, bucket=bucket, lake_key=self.key)
        self.notifications = Notifications(self, "Notifications", settings=settings, bucket=bucket)
        self.glue_databases = GlueDatabases(
            self, "Catalog", settings=settings, topics=topics, bucket=bucket, key=self.key
        )
        self.maintainer = Maintainer(
            self,
            "Maintainer",
            settings=settings,
            topics=topics,
            databases=self.glue_databases.databases,
            bucket=bucket,
            lake_key=self.key,
            queue_key=self.notifications.key,
            queue=self.notifications.queue,
            bus=self.notifications.bus,
            build_dir=build_dir / settings.name,
        )
        self.reconciler = self._reconciler(settings, bucket)
        self.jobs = Jobs(
            self,
            "Jobs",
            settings=settings,
            topics=topics,
            databases=self.glue_databases.databases,
            bucket=bucket,
            key=self.key,
            queue_key=self.notifications.key,
            personal=self.personal,
            build_dir=build_dir / settings.name,
        )
        self.monitoring = self._monitoring(settings)
        self.access = self._access(settings, topics, bucket)

    def _reconciler(self, settings: EnvironmentConfig, bucket: s3.IBucket) -> Reconciler:
        return Reconciler(
            self,
            "Reconciler",
            settings=settings,
            databases=self.glue_databases.databases,
            bucket=bucket,
            key=self.key,
            queue_key=self.notifications.key,
            code=self.maintainer.code,
        )

    def _monitoring(self, settings: EnvironmentConfig) -> Monitoring:
        return Monitoring(
            self,
            "Monitoring",
            settings=settings,
            key=self.notifications.key,
            queue=self.notifications.queue,
            dead_letter_queues={
                "NotificationsDlq": self.notifications.dlq,
                "MaintainerDlq": self.maintainer.dead_letters,
                "ReconcilerDlq": self.reconciler.dead_letters,
                "ScheduleDlq": self.jobs.dead_letters,
            },
            maintainer=self.maintainer.function,
            reconciler=self.reconciler.function,
            applications=self.jobs.applications,
            schedule_group=self.jobs.group.ref,
        )

    def _access(self, settings: EnvironmentConfig, topics: list[Topic], bucket: s3.IBucket) -> LakeAccess:
        return LakeAccess(
            self,
            "Access",
            settings=settings,
            topics=topics,
            glue_databases=self.glue_databases,
            bucket=bucket,
            key=self.key,
            writers=self._lake_writers(),
        )

    def _lake_writers(self) -> dict[str, LakeWriter]:
        """Each pipeline role's Lake Formation permissions, from its Glue calls (``docs/access.md``):
        - crawlers (not recorded, AWS's rule for crawlers): create tables, and update the tables they crawl;
        - maintainer: CreateTable (CREATE_TABLE, the location), GetTable, UpdateTable and the partition APIs
          (ALTER), AddLFTagsToResource on crawler-made tables too (the table permissions with the grant option);
        - reconciler: GetTable, GetPartitions, BatchCreatePartition (ALTER, the location);
        - compactor and erasure (one ``Rewriter``): GetPartitions, GetPartition, UpdatePartition re-pointing a
          partition at its run directory under the data prefix (ALTER, the location); on an Iceberg table, GetTable
          and UpdateTable committing a rewrite or a delete (ALTER);
        - archiver, only in an environment with Iceberg topics: CreateTable at a topic's first plan (CREATE_TABLE,
          the location); GetTable before the table exists (pyiceberg looks first: DESCRIBE); UpdateTable committing
          each plan needs no grant, as the table's creator holds everything on it.
        ALTER implies DESCRIBE on the table; DESCRIBE on the database lets each see it."""
        tagger = ("ALTER", "DELETE", "DESCRIBE", "DROP", "INSERT", "SELECT")

        def rewriter(role: iam.IRole) -> LakeWriter:
            return LakeWriter(role, database=("DESCRIBE",), tables=("ALTER",), locates=True)

        return {
            "Crawlers": LakeWriter(
                self.glue_databases.crawler_role,
                database=("CREATE_TABLE", "DESCRIBE"),
                tables=("ALTER", "DESCRIBE", "INSERT", "SELECT"),
                locates=True,
            ),
            "Maintainer": LakeWriter(
                self.maintainer.role,
                database=("CREATE_TABLE",),
                tables=tagger,
                tables_grantable=tagger,
                locates=True,
                tags=True,
            ),
            "Reconciler": rewriter(self.reconciler.role),
            "Compactor": rewriter(self.jobs.compactor_role),
            "Erasure": rewriter(self.jobs.erasure_role),
            **(
                {
                    "Archiver": LakeWriter(
                        self.jobs.archiver_role,
                        database=("CREATE_TABLE", "DESCRIBE"),
                        tables=("DESCRIBE",),
                        locates=True,
                        databases=frozenset(t.database for t in self.jobs.iceberg_topics),
                    )
                }
                if self.jobs.iceberg_topics
                else {}
            ),
        }
