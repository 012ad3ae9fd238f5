"""Alarms (to an encrypted SNS topic) and a dashboard over the queue, the maintainer and the jobs."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_emrserverless as emr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import skip_scanners
from kafkalake.environments import EnvironmentConfig
from kafkalake.metrics import (
    ENVIRONMENT_DIMENSION,
    GLUE_DATA_AGE,
    MAINTAINER_DASHBOARD_COUNTS,
    MAINTAINER_SERVICE,
    NAMESPACE,
    RECONCILER_SERVICE,
    ArchiverMetric,
    ErasureMetric,
    MaintainerCount,
    ReconcileMetric,
    SchemaDriftMetric,
)

PERIOD = Duration.minutes(5)


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        key: kms.IKey,
        queue: sqs.Queue,
        dead_letter_queues: dict[str, sqs.Queue],
        maintainer: lambda_.Function,
        reconciler: lambda_.Function,
        applications: dict[str, emr.CfnApplication],
        schedule_group: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        self._subscribe(settings)
        action = cw_actions.SnsAction(self.alarm_topic)
        metrics = self._metrics(queue, dead_letter_queues, maintainer, applications, schedule_group)
        thresholds = {"OldestNotification": settings.oldest_notification_alarm_seconds}
        self.alarms = {name: self._alarm(name, m, thresholds.get(name, 0), action) for name, m in metrics.items()}
        self.alarms |= self._archiver_alarms(settings, action)
        self.alarms |= self._catalog_alarms(settings, action)
        self.alarms["GlueDataStale"] = self._alarm(
            "GlueDataStale",
            cloudwatch.Metric(
                namespace=NAMESPACE,
                metric_name=GLUE_DATA_AGE,
                statistic="Maximum",
                period=Duration.minutes(settings.maintainer_schedule_minutes),
                dimensions_map={"service": MAINTAINER_SERVICE},
            ),
            settings.freshness_alarm_minutes * 60,
            action,
        )
        self.alarms |= self._reconciler_alarms(reconciler, action)
        self.alarms |= self._erasure_alarms(settings, action)
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"kafkalake-{settings.name}")
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Maintainer",
                left=[self._maintainer_count(c, PERIOD) for c in MAINTAINER_DASHBOARD_COUNTS],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=12),
            cloudwatch.GraphWidget(
                title="Queue", left=[metrics["OldestNotification"], metrics["NotificationsDlqNotEmpty"]], width=12
            ),
            cloudwatch.GraphWidget(
                title="Jobs", left=[metrics[f"{name}JobFailures"] for name in applications], width=12
            ),
        )

    def _subscribe(self, settings: EnvironmentConfig) -> None:
        for subscription in settings.alarm_subscriptions:
            delivery = sns.Subscription(
                self,
                f"Subscription-{subscription.protocol}-{subscription.endpoint}",
                topic=self.alarm_topic,
                protocol=sns.SubscriptionProtocol(subscription.protocol.upper()),
                endpoint=subscription.endpoint,
            )
            skip_scanners(
                delivery,
                "Alarm deliveries SNS fails to make are retried by SNS; the alarm itself stays in the alarm history "
                "and on the dashboard, so no notification content is lost.",
                cfn_lint=["ES7000"],
            )

    def _metrics(
        self,
        queue: sqs.Queue,
        dead_letter_queues: dict[str, sqs.Queue],
        maintainer: lambda_.Function,
        applications: dict[str, emr.CfnApplication],
        schedule_group: str,
    ) -> dict[str, cloudwatch.IMetric]:
        """What the alarms watch: each dead-letter queue, the queue's oldest message, the maintainer (its function
        and its own counts), each job's application, the job schedules."""
        period = PERIOD
        metrics: dict[str, cloudwatch.IMetric] = {
            f"{name}NotEmpty": dlq.metric_approximate_number_of_messages_visible(period=period)
            for name, dlq in dead_letter_queues.items()
        }
        metrics |= {
            "OldestNotification": queue.metric_approximate_age_of_oldest_message(period=period),
            "MaintainerErrors": maintainer.metric_errors(period=period),
            "MaintainerThrottles": maintainer.metric_throttles(period=period),
            "MaintainerDrainErrors": self._maintainer_count(MaintainerCount.ERRORS, period),
            "MalformedNotifications": self._maintainer_count(MaintainerCount.MALFORMED, period),
            **{
                f"{name}JobFailures": cloudwatch.Metric(
                    namespace="AWS/EMRServerless",
                    metric_name="FailedJobs",
                    period=period,
                    statistic="Sum",
                    dimensions_map={"ApplicationId": application.attr_application_id},
                )
                for name, application in applications.items()
            },
            **{
                f"Schedule{name}": cloudwatch.Metric(
                    namespace="AWS/Scheduler",
                    metric_name=metric,
                    period=period,
                    statistic="Sum",
                    dimensions_map={"ScheduleGroup": schedule_group},
                )
                for name, metric in (("TargetErrors", "TargetErrorCount"), ("Dropped", "InvocationDroppedCount"))
            },
        }
        return metrics

    @staticmethod
    def _maintainer_count(count: MaintainerCount, period: Duration) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name=count,
            statistic="Sum",
            period=period,
            dimensions_map={"service": MAINTAINER_SERVICE},
        )

    def _archiver_alarms(
        self, settings: EnvironmentConfig, action: cloudwatch.IAlarmAction
    ) -> dict[str, cloudwatch.Alarm]:
        """A topic failed in the latest run; the fleet's total lag grew over three archiver runs in a row; the
        latest run held records of schema versions the catalog lacks (``kafkalake.undeclared``)."""
        period = Duration.minutes(settings.archiver_schedule_minutes)
        environment = {ENVIRONMENT_DIMENSION: settings.name}

        def metric(name: ArchiverMetric, statistic: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=NAMESPACE, metric_name=name, statistic=statistic, period=period, dimensions_map=environment
            )

        lag_growth = cloudwatch.MathExpression(
            expression="DIFF(lag)",
            using_metrics={"lag": metric(ArchiverMetric.TOTAL_LAG, "Maximum")},
            period=period,
            label="growth of the archiver's total lag per run",
        )
        return {
            "ArchiverTopicsFailed": self._alarm(
                "ArchiverTopicsFailed", metric(ArchiverMetric.TOPICS_FAILED, "Maximum"), 0, action
            ),
            "ArchiverLagGrowing": self._alarm("ArchiverLagGrowing", lag_growth, 0, action, periods=3),
            "ArchiverRecordsHeld": self._alarm(
                "ArchiverRecordsHeld", metric(ArchiverMetric.RECORDS_HELD, "Maximum"), 0, action
            ),
        }

    def _catalog_alarms(
        self, settings: EnvironmentConfig, action: cloudwatch.IAlarmAction
    ) -> dict[str, cloudwatch.Alarm]:
        """The latest scheduled archiver run found topics that follow the naming convention and no catalog entry
        names (never archived: `kafkalake catalog import`), or registry versions the catalog lacks (their records
        are quarantined)."""
        period = Duration.minutes(settings.archiver_schedule_minutes)
        return {
            metric.value: self._alarm(
                metric.value,
                cloudwatch.Metric(
                    namespace=NAMESPACE,
                    metric_name=metric,
                    statistic="Maximum",
                    period=period,
                    dimensions_map={ENVIRONMENT_DIMENSION: settings.name},
                ),
                0,
                action,
            )
            for metric in (SchemaDriftMetric.UNCATALOGUED_TOPICS, SchemaDriftMetric.MISSING_SCHEMA_VERSIONS)
        }

    def _reconciler_alarms(
        self, reconciler: lambda_.Function, action: cloudwatch.IAlarmAction
    ) -> dict[str, cloudwatch.Alarm]:
        """The reconciler repaired something (S3 events were lost: look at the notification DLQ and
        configuration), or it failed; one day, as it runs daily."""
        period = Duration.days(1)
        repaired = cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name=ReconcileMetric.PARTITIONS_REPAIRED,
            statistic="Sum",
            period=period,
            dimensions_map={"service": RECONCILER_SERVICE},
        )
        return {
            "ReconcilerRepairedPartitions": self._alarm("ReconcilerRepairedPartitions", repaired, 0, action),
            "ReconcilerErrors": self._alarm("ReconcilerErrors", reconciler.metric_errors(period=period), 0, action),
        }

    def _erasure_alarms(
        self, settings: EnvironmentConfig, action: cloudwatch.IAlarmAction
    ) -> dict[str, cloudwatch.Alarm]:
        """An erasure request is past its deadline without a receipt (the erasure job runs hourly)."""
        late = cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name=ErasureMetric.REQUESTS_LATE,
            statistic="Maximum",
            period=Duration.hours(1),
            dimensions_map={ENVIRONMENT_DIMENSION: settings.name},
        )
        return {"ErasureRequestsLate": self._alarm("ErasureRequestsLate", late, 0, action)}

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        action: cloudwatch.IAlarmAction,
        periods: int = 1,
    ) -> cloudwatch.Alarm:
        """Fires when ``metric`` stays above ``threshold`` for ``periods`` periods; no data is no alarm."""
        alarm = cloudwatch.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            evaluation_periods=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        return alarm
