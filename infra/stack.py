"""One kafkalake environment: lake bucket, notifications, maintainer Lambda, Glue, EMR Serverless, monitoring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import DefaultStackSynthesizer, Duration, RemovalPolicy, Stack, Tags
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_emrserverless as emr
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.assets import job_environment, jobs_bundle, maintainer_bundle
from infra.nag import acknowledge
from kafkalake.catalog import Topic
from kafkalake.environments import EnvironmentSettings
from kafkalake.layout import COMPACTED_ROOT, DATA_ROOT, QUARANTINE_ROOT, STAGING_ROOT, STATE_ROOT
from kafkalake.naming import TableInference
from kafkalake.provision import crawler_request, notification_filter
from kafkalake.stack import EMR_RELEASE
from spark_jobs.submit import CATALOG_DIR, JobArtifacts, spark_submit_parameters

MAINTAINER_GLUE_ACTIONS = (
    "glue:GetTable",
    "glue:CreateTable",
    "glue:UpdateTable",
    "glue:GetPartitions",
    "glue:BatchGetPartition",
    "glue:BatchCreatePartition",
    "glue:BatchUpdatePartition",
)


def lifecycle_rules(settings: EnvironmentSettings, topics: list[Topic]) -> list[s3.LifecycleRule]:
    """Abort stale uploads; tier data by age; expire each topic's data after its retention (GDPR), and the
    quarantine/staging/state prefixes after their own."""
    rules = [
        s3.LifecycleRule(id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)),
        s3.LifecycleRule(
            id="tier-data",
            prefix=f"{DATA_ROOT}/",
            transitions=[
                s3.Transition(
                    storage_class=s3.StorageClass.INTELLIGENT_TIERING,
                    transition_after=Duration.days(settings.data_transition_days),
                )
            ],
        ),
        s3.LifecycleRule(
            id="expire-quarantine",
            prefix=f"{QUARANTINE_ROOT}/",
            expiration=Duration.days(settings.quarantine_retention_days),
        ),
        s3.LifecycleRule(
            id="expire-staging", prefix=f"{STAGING_ROOT}/", expiration=Duration.days(settings.staging_retention_days)
        ),
        s3.LifecycleRule(
            id="expire-noncurrent-versions",
            noncurrent_version_expiration=Duration.days(settings.staging_retention_days),
        ),
    ]
    for topic in topics:
        if topic.spec.retention_days is None:
            continue
        for root, prefix in (
            (DATA_ROOT, topic.prefix.data_prefix()),
            (COMPACTED_ROOT, topic.prefix.compacted_prefix()),
        ):
            rules.append(
                s3.LifecycleRule(
                    id=f"retain-{root}-{topic.database}-{topic.table}"[:255],
                    prefix=prefix,
                    expiration=Duration.days(topic.spec.retention_days),
                )
            )
    return rules


class KafkalakeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentSettings,
        topics: list[Topic],
        build_dir: Path,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings, self.topics = settings, topics
        Tags.of(self).add("kafkalake:environment", settings.name)
        self.key = kms.Key(
            self,
            "LakeKey",
            enable_key_rotation=True,
            alias=f"alias/kafkalake-{settings.name}",
            description=f"kafkalake {settings.name}: lake bucket, queues, topics, Glue logs",
        )
        self._storage()
        self._notifications()
        self._glue()
        self._maintainer(build_dir)
        self._emr(build_dir)
        self._monitoring()

    # --- storage -------------------------------------------------------------------------------------------------
    def _storage(self) -> None:
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.access_logs, "This is the access-log bucket itself; logging it to itself loops.", "AwsSolutions-S1"
        )
        # Versioning: on. The archiver's overwrites are byte-identical redos and the compactor deletes inputs
        # only after a grace period, so old versions are not needed long: they expire after a few days.
        self.bucket = s3.Bucket(
            self,
            "Lake",
            bucket_name=self.settings.bucket,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="lake/",
            lifecycle_rules=lifecycle_rules(self.settings, self.topics),
            removal_policy=RemovalPolicy.RETAIN,
        )

    # --- notifications -------------------------------------------------------------------------------------------
    def _notifications(self) -> None:
        # A key of their own: S3 must be allowed to use it for this bucket, and a policy on the bucket's key
        # naming the bucket would make key and bucket depend on each other.
        self.queue_key = kms.Key(
            self,
            "QueueKey",
            enable_key_rotation=True,
            alias=f"alias/kafkalake-{self.settings.name}-notifications",
            description=f"kafkalake {self.settings.name}: notification queues and alarms",
        )
        self.dlq = sqs.Queue(
            self,
            "NotificationsDlq",
            queue_name=self.settings.dead_letter_queue_name,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.queue_key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        acknowledge(self.dlq, "This queue is the dead-letter queue of the notification queue.", "AwsSolutions-SQS3")
        self.queue = sqs.Queue(
            self,
            "Notifications",
            queue_name=self.settings.queue_name,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.queue_key,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(self.settings.queue_visibility_timeout_seconds),
            retention_period=Duration.days(14),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=self.settings.max_receive_count),
        )
        rules = notification_filter()["Key"]["FilterRules"]
        key_filter = s3.NotificationKeyFilter(
            prefix=next(r["Value"] for r in rules if r["Name"] == "prefix"),
            suffix=next(r["Value"] for r in rules if r["Name"] == "suffix"),
        )
        self.bucket.add_event_notification(s3.EventType.OBJECT_CREATED, s3n.SqsDestination(self.queue), key_filter)
        acknowledge(
            self,
            "CDK's own BucketNotificationsHandler custom resource (it configures the bucket notification) "
            "uses the AWS-managed basic execution role; it runs only during deployments.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        )
        # Only S3, from this bucket in this account, may send.
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyThisBucket",
                effect=iam.Effect.DENY,
                principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={
                    "ArnNotEquals": {"aws:SourceArn": self.bucket.bucket_arn},
                    "StringNotEquals": {"aws:SourceAccount": self.account},
                },
            )
        )
        self.bus = events.EventBus(self, "Bus", event_bus_name=self.settings.event_bus_name)

    def _object_finding(self, root: str) -> str:
        lake_id = self.resolve(self.bucket.bucket_arn)["Fn::GetAtt"][0]
        return f"AwsSolutions-IAM5[Resource::<{lake_id}.Arn>/{root}/*]"

    def _glue_arn(self) -> str:
        return f"arn:{self.partition}:glue:{self.region}:{self.account}"

    def _glue_table_resources(self) -> list[str]:
        """The catalog, our databases and every table in them (tables are created at run time)."""
        arn = self._glue_arn()
        return [
            f"{arn}:catalog",
            *(f"{arn}:database/{db}" for db in self.databases),
            *(f"{arn}:table/{db}/*" for db in self.databases),
        ]

    @staticmethod
    def _read_grant_findings() -> list[str]:
        return [
            f"AwsSolutions-IAM5[Action::{a}]"
            for a in ("s3:GetObject*", "s3:GetBucket*", "s3:List*", "kms:ReEncrypt*", "kms:GenerateDataKey*")
        ]

    # --- glue ----------------------------------------------------------------------------------------------------
    def _glue(self) -> None:
        self.databases = sorted({t.database for t in self.topics})
        for database in self.databases:
            glue.CfnDatabase(
                self,
                f"Database-{database}",
                catalog_id=self.account,
                database_input=glue.CfnDatabase.DatabaseInputProperty(name=database),
            )
        crawl_topics = [t for t in self.topics if t.spec.table_inference == TableInference.CRAWLER]
        self.crawler_role = iam.Role(
            self,
            "CrawlerRole",
            assumed_by=iam.ServicePrincipal("glue.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSGlueServiceRole")],
        )
        acknowledge(
            self.crawler_role,
            "AWSGlueServiceRole is the role AWS documents for Glue crawlers.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSGlueServiceRole]",
        )
        self.bucket.grant_read(self.crawler_role, f"{DATA_ROOT}/*")
        self.key.grant_encrypt_decrypt(self.crawler_role)
        acknowledge(
            self.crawler_role,
            "Crawlers read every object under the data prefix (CDK's grant_read actions) and "
            "decrypt them with the lake key (grant_encrypt_decrypt's key actions).",
            *self._read_grant_findings(),
            self._object_finding(DATA_ROOT),
        )
        self.security_configuration = glue.CfnSecurityConfiguration(
            self,
            "GlueSecurity",
            name=f"kafkalake-{self.settings.name}",
            encryption_configuration=glue.CfnSecurityConfiguration.EncryptionConfigurationProperty(
                cloud_watch_encryption=glue.CfnSecurityConfiguration.CloudWatchEncryptionProperty(
                    cloud_watch_encryption_mode="SSE-KMS", kms_key_arn=self.key.key_arn
                ),
                job_bookmarks_encryption=glue.CfnSecurityConfiguration.JobBookmarksEncryptionProperty(
                    job_bookmarks_encryption_mode="CSE-KMS", kms_key_arn=self.key.key_arn
                ),
                s3_encryptions=[
                    glue.CfnSecurityConfiguration.S3EncryptionProperty(
                        s3_encryption_mode="SSE-KMS", kms_key_arn=self.key.key_arn
                    )
                ],
            ),
        )
        self.crawlers = []
        for topic in crawl_topics:
            request = crawler_request(
                topic.crawler_name, topic.database, f"s3://{self.settings.bucket}/{topic.prefix.data_prefix()}"
            )
            crawler = glue.CfnCrawler(
                self,
                f"Crawler-{topic.database}-{topic.table}",
                name=request["Name"],
                role=self.crawler_role.role_arn,
                database_name=request["DatabaseName"],
                targets=glue.CfnCrawler.TargetsProperty(
                    s3_targets=[
                        glue.CfnCrawler.S3TargetProperty(path=t["Path"]) for t in request["Targets"]["S3Targets"]
                    ]
                ),
                recrawl_policy=glue.CfnCrawler.RecrawlPolicyProperty(
                    recrawl_behavior=request["RecrawlPolicy"]["RecrawlBehavior"]
                ),
                schema_change_policy=glue.CfnCrawler.SchemaChangePolicyProperty(
                    update_behavior=request["SchemaChangePolicy"]["UpdateBehavior"],
                    delete_behavior=request["SchemaChangePolicy"]["DeleteBehavior"],
                ),
                configuration=request["Configuration"],
                crawler_security_configuration=self.security_configuration.name,
            )
            self.crawlers.append(crawler)

    # --- maintainer ----------------------------------------------------------------------------------------------
    def _maintainer(self, build_dir: Path) -> None:
        name = f"kafkalake-{self.settings.name}-maintainer"
        log_group = logs.LogGroup(
            self,
            "MaintainerLogs",
            log_group_name=f"/aws/lambda/{name}",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(self, "MaintainerRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                resources=[self.queue.queue_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["kms:Decrypt"], resources=[self.key.key_arn, self.queue_key.key_arn])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(MAINTAINER_GLUE_ACTIONS),
                resources=self._glue_table_resources(),
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["glue:GetCrawler", "glue:StartCrawler"],
                resources=[f"{self._glue_arn()}:crawler/kafkalake-{db}-*" for db in self.databases],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[self.bucket.arn_for_objects(f"{DATA_ROOT}/*")])
        )
        role.add_to_policy(iam.PolicyStatement(actions=["events:PutEvents"], resources=[self.bus.event_bus_arn]))
        acknowledge(
            role,
            "X-Ray trace upload has no resource-level permissions (AWS requires *). Tables and crawlers are "
            "created at run time, so their ARNs end in a wildcard scoped to our databases and crawler naming "
            "convention; data objects are read by key under the data prefix.",
            "AwsSolutions-IAM5[Resource::*]",
            self._object_finding(DATA_ROOT),
            *[
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:{self.region}:<AWS::AccountId>:table/{db}/*]"
                for db in self.databases
            ],
            *[
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:{self.region}:<AWS::AccountId>:crawler/"
                f"kafkalake-{db}-*]"
                for db in self.databases
            ],
        )
        self.maintainer = lambda_.Function(
            self,
            "Maintainer",
            function_name=name,
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler="lambdas.maintainer.handler.handler",
            code=lambda_.Code.from_asset(str(maintainer_bundle(build_dir / self.settings.name, self.topics))),
            layers=[
                lambda_.LayerVersion.from_layer_version_arn(self, f"Layer{i}", arn)
                for i, arn in enumerate(self.settings.maintainer_layers)
            ],
            memory_size=1024,
            timeout=Duration.seconds(self.settings.maintainer_timeout_seconds),
            reserved_concurrent_executions=1,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment={
                "KAFKALAKE_BUCKET": self.settings.bucket,
                "KAFKALAKE_QUEUE_URL": self.queue.queue_url,
                "KAFKALAKE_EVENT_BUS": self.bus.event_bus_name,
                "KAFKALAKE_CACHE_TTL_SECONDS": str(self.settings.cache_ttl_seconds),
                "KAFKALAKE_COMPLETENESS_DELAY_SECONDS": str(self.settings.completeness_delay_seconds),
                "KAFKALAKE_AWS_ENDPOINT_URL": "",
                "POWERTOOLS_SERVICE_NAME": "kafkalake-maintainer",
                "POWERTOOLS_METRICS_NAMESPACE": "kafkalake",
            },
        )
        events.Rule(
            self,
            "MaintainerSchedule",
            schedule=events.Schedule.rate(Duration.minutes(self.settings.maintainer_schedule_minutes)),
            targets=[targets.LambdaFunction(self.maintainer)],
        )
        acknowledge(
            self.maintainer,
            "Pinned to python3.13, the runtime of the Powertools and SDK-for-pandas layers "
            "configured in environments.yaml; upgrade together with the layers.",
            "AwsSolutions-L1",
        )

    # --- EMR Serverless ------------------------------------------------------------------------------------------
    def _emr(self, build_dir: Path) -> None:
        bundle = jobs_bundle(build_dir / self.settings.name)
        self.job_package = s3_assets.Asset(self, "JobPackage", path=str(bundle / "kafkalake_jobs.zip"))
        self.job_entrypoint = s3_assets.Asset(self, "JobEntrypoint", path=str(bundle / "entrypoint.py"))
        self.job_catalog = s3_assets.Asset(self, "JobCatalog", path=str(bundle / "catalog.zip"))
        environment = job_environment(build_dir / self.settings.name / "environment")
        self.job_environment = s3_assets.Asset(self, "JobEnvironment", path=str(environment))
        self.job_artifacts = JobArtifacts(
            self.job_entrypoint.s3_object_url,
            self.job_package.s3_object_url,
            self.job_catalog.s3_object_url,
            self.job_environment.s3_object_url,
        )
        network = None
        if self.settings.subnet_ids:
            network = emr.CfnApplication.NetworkConfigurationProperty(
                subnet_ids=list(self.settings.subnet_ids), security_group_ids=list(self.settings.security_group_ids)
            )
        self.application = emr.CfnApplication(
            self,
            "Spark",
            name=f"kafkalake-{self.settings.name}",
            release_label=EMR_RELEASE,
            type="SPARK",
            auto_start_configuration=emr.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emr.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=15
            ),
            network_configuration=network,
        )
        self.archiver_role = iam.Role(
            self, "ArchiverJobRole", assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com")
        )
        self.archiver_role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject"],
                resources=[
                    self.bucket.arn_for_objects(f"{root}/*") for root in (DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT)
                ],
            )
        )
        self.archiver_role.add_to_policy(
            iam.PolicyStatement(actions=["s3:DeleteObject"], resources=[self.bucket.arn_for_objects(f"{STATE_ROOT}/*")])
        )
        self.archiver_role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn])
        )
        for asset in self._job_assets():
            asset.grant_read(self.archiver_role)
        self.key.grant_encrypt_decrypt(self.archiver_role)
        if self.settings.kafka_secret_arn:
            self.archiver_role.add_to_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue"], resources=[self.settings.kafka_secret_arn]
                )
            )
        acknowledge(
            self.archiver_role,
            "The archiver writes objects it names at run time under the data, quarantine and "
            "state prefixes, and reads its job package from the CDK asset bucket (CDK's grant_read actions).",
            *self._read_grant_findings(),
            *(self._object_finding(root) for root in (DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT)),
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-"
            f"{DefaultStackSynthesizer.DEFAULT_QUALIFIER}-assets-<AWS::AccountId>-{self.region}/*]",
        )
        self.compactor_role = self._compactor_role()
        self.schedules: dict[str, scheduler.CfnSchedule] = {}
        names = [arg for t in self.topics for arg in ("--topic", t.name)]
        self._job_schedule(
            "Archiver",
            f"rate({self.settings.archiver_schedule_minutes} minutes)",
            self.archiver_role,
            ["archive", "--env", self.settings.name, "--catalog", CATALOG_DIR, *names],
        )
        tables = [arg for t in self.topics for arg in ("--table", t.name)]
        self._job_schedule(
            "Compactor",
            "rate(1 hour)",
            self.compactor_role,
            ["compact", "--env", self.settings.name, "--catalog", CATALOG_DIR, *tables],
        )

    def _job_assets(self) -> tuple[s3_assets.Asset, ...]:
        return (self.job_package, self.job_entrypoint, self.job_catalog, self.job_environment)

    def _compactor_role(self) -> iam.Role:
        role = iam.Role(self, "CompactorJobRole", assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[
                    self.bucket.arn_for_objects(f"{root}/*") for root in (DATA_ROOT, COMPACTED_ROOT, STATE_ROOT)
                ],
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["glue:GetPartitions", "glue:GetPartition", "glue:UpdatePartition", "glue:GetTable"],
                resources=self._glue_table_resources(),
            )
        )
        for asset in self._job_assets():
            asset.grant_read(role)
        self.key.grant_encrypt_decrypt(role)
        acknowledge(
            role,
            "The compactor reads and deletes objects under the data prefix, writes and deletes its own "
            "output and manifests, and updates partitions of tables created at run time in our databases; it "
            "reads its job package from the CDK asset bucket (CDK's grant_read actions).",
            *self._read_grant_findings(),
            *(self._object_finding(root) for root in (DATA_ROOT, COMPACTED_ROOT, STATE_ROOT)),
            *[
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:{self.region}:<AWS::AccountId>:table/{db}/*]"
                for db in self.databases
            ],
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-"
            f"{DefaultStackSynthesizer.DEFAULT_QUALIFIER}-assets-<AWS::AccountId>-{self.region}/*]",
        )
        return role

    def _job_schedule(self, name: str, expression: str, job_role: iam.Role, arguments: list[str]) -> None:
        """An EventBridge Scheduler schedule that starts an EMR Serverless job run of the packaged jobs."""
        scheduler_role = iam.Role(
            self, f"{name}SchedulerRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com")
        )
        scheduler_role.add_to_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[self.application.attr_arn])
        )
        scheduler_role.add_to_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=[job_role.role_arn]))
        request = {
            "ApplicationId": self.application.attr_application_id,
            "ExecutionRoleArn": job_role.role_arn,
            "ClientToken": "<aws.scheduler.execution-id>",
            "Name": f"kafkalake-{self.settings.name}-{name.lower()}",
            "JobDriver": {
                "SparkSubmit": {
                    "EntryPoint": self.job_artifacts.entry_point,
                    "EntryPointArguments": arguments,
                    "SparkSubmitParameters": spark_submit_parameters(self.settings, self.job_artifacts),
                }
            },
        }
        self.schedules[name] = scheduler.CfnSchedule(
            self,
            f"{name}Schedule",
            name=f"kafkalake-{self.settings.name}-{name.lower()}",
            schedule_expression=expression,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn="arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun",
                role_arn=scheduler_role.role_arn,
                input=self.to_json_string(request),
            ),
        )

    # --- monitoring ----------------------------------------------------------------------------------------------
    def _monitoring(self) -> None:
        self.alarm_topic = sns.Topic(self, "Alarms", master_key=self.queue_key, enforce_ssl=True)
        action = cw_actions.SnsAction(self.alarm_topic)
        period = Duration.minutes(5)
        maintainer_minutes = self.settings.maintainer_schedule_minutes
        alarms = {
            "DlqNotEmpty": self.dlq.metric_approximate_number_of_messages_visible(period=period),
            "OldestNotification": self.queue.metric_approximate_age_of_oldest_message(period=period),
            "MaintainerErrors": self.maintainer.metric_errors(period=period),
            "MaintainerThrottles": self.maintainer.metric_throttles(period=period),
            "ArchiverJobFailures": cloudwatch.Metric(
                namespace="AWS/EMRServerless",
                metric_name="FailedJobs",
                period=period,
                statistic="Sum",
                dimensions_map={"ApplicationId": self.application.attr_application_id},
            ),
        }
        thresholds = {"OldestNotification": 3 * maintainer_minutes * 60}
        self.alarms = {}
        for name, metric in alarms.items():
            alarm = cloudwatch.Alarm(
                self,
                name,
                metric=metric,
                threshold=thresholds.get(name, 0),
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(action)
            self.alarms[name] = alarm
        maintainer_metric = {
            name: cloudwatch.Metric(
                namespace="kafkalake",
                metric_name=name,
                statistic="Sum",
                period=period,
                dimensions_map={"service": "kafkalake-maintainer"},
            )
            for name in ("messages", "partitions_added", "tables_created", "crawlers_started", "malformed", "errors")
        }
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"kafkalake-{self.settings.name}")
        dashboard.add_widgets(
            cloudwatch.GraphWidget(title="Maintainer", left=list(maintainer_metric.values()), width=12),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=12),
            cloudwatch.GraphWidget(title="Queue", left=[alarms["OldestNotification"], alarms["DlqNotEmpty"]], width=12),
            cloudwatch.GraphWidget(title="Archiver jobs", left=[alarms["ArchiverJobFailures"]], width=12),
        )
