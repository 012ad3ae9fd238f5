"""Monitoring in the synthesized templates: the dashboard and metrics, and alarms that can notify and fire only
when something is wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.cdk_templates import ENVIRONMENTS, resources, template


@pytest.mark.parametrize("env", ["staging", "production"])
def test_monitoring(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    # 14 + reconciler: repaired, errors, its DLQ; drift: 2; freshness; erasure: late requests, its job's failures;
    # records held for schema versions the catalog lacks
    tpl.resource_count_is("AWS::CloudWatch::Alarm", 23)
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "GlueDataAgeSeconds",
            "Namespace": "kafkalake",
            "Dimensions": [{"Name": "service", "Value": "kafkalake-maintainer"}],
            "Statistic": "Maximum",
            "Period": 60 * ENVIRONMENTS[env].maintainer_schedule_minutes,
            "Threshold": 60 * ENVIRONMENTS[env].freshness_alarm_minutes,
        },
    )
    for drift in ("CatalogUncataloguedTopics", "CatalogMissingSchemaVersions"):
        tpl.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "MetricName": drift,
                "Namespace": "kafkalake",
                "Dimensions": [{"Name": "Environment", "Value": env}],
                "Statistic": "Maximum",
                "Period": 60 * ENVIRONMENTS[env].archiver_schedule_minutes,
                "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold",
            },
        )
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ErasureRequestsLate",
            "Namespace": "kafkalake",
            "Dimensions": [{"Name": "Environment", "Value": env}],
            "Statistic": "Maximum",
            "Period": 3600,
            "Threshold": 0,
        },
    )
    for archiver in ("ArchiverTopicsFailed", "ArchiverRecordsHeld"):
        tpl.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "MetricName": archiver,
                "Namespace": "kafkalake",
                "Dimensions": [{"Name": "Environment", "Value": env}],
                "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold",
            },
        )
    growth = next(
        a["Properties"]
        for a in resources(tpl, "AWS::CloudWatch::Alarm").values()
        if any(m.get("Expression") == "DIFF(lag)" for m in a["Properties"].get("Metrics", []))
    )
    assert growth["EvaluationPeriods"] == 3 and growth["Threshold"] == 0
    [lag] = [m for m in growth["Metrics"] if m["Id"] == "lag"]
    assert lag["MetricStat"]["Metric"]["MetricName"] == "ArchiverTotalLag"
    assert lag["MetricStat"]["Period"] == 60 * ENVIRONMENTS[env].archiver_schedule_minutes
    tpl.resource_count_is("AWS::CloudWatch::Dashboard", 1)
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 0}
    )
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "FailedJobs", "Namespace": "AWS/EMRServerless"}
    )


@pytest.mark.parametrize("env", ["staging", "production"])
def test_alarms_can_notify_and_fire_only_when_something_is_wrong(stacks: Any, env: str) -> None:
    """(8) the alarm topic's key admits CloudWatch, subscriptions come from environments.yaml; (11) thresholds and
    the alarms the maintainer's own metrics and each job need."""
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    keys = resources(tpl, "AWS::KMS::Key")
    queue_key = next(r for k, r in keys.items() if k.startswith("NotificationsQueueKey"))
    statements = queue_key["Properties"]["KeyPolicy"]["Statement"]
    alarms_statement = next(s for s in statements if s.get("Sid") == "CloudWatchAlarms")
    assert alarms_statement["Principal"]["Service"] == "cloudwatch.amazonaws.com"
    subscriptions = [r["Properties"] for r in resources(tpl, "AWS::SNS::Subscription").values()]
    assert settings.alarm_subscriptions
    assert sorted((s["Protocol"], s["Endpoint"]) for s in subscriptions) == sorted(
        (s.protocol, s.endpoint) for s in settings.alarm_subscriptions
    )
    alarms = {k: r["Properties"] for k, r in resources(tpl, "AWS::CloudWatch::Alarm").items()}
    oldest = next(a for a in alarms.values() if a.get("MetricName") == "ApproximateAgeOfOldestMessage")
    assert oldest["Threshold"] == settings.oldest_notification_alarm_seconds > settings.queue_visibility_timeout_seconds
    names = {a.get("MetricName") for a in alarms.values()}
    assert {"errors", "malformed", "TargetErrorCount", "InvocationDroppedCount"} <= names
    failed_jobs = [a for a in alarms.values() if a.get("MetricName") == "FailedJobs"]
    applications = {json.dumps(a["Dimensions"]) for a in failed_jobs}
    assert len(failed_jobs) == 3 and len(applications) == 3, "one job-failure alarm per application"
