"""CloudWatch metric names, defined once for the code that publishes them and the alarms and dashboard that read
them."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

NAMESPACE: Final = "kafkalake"
MAINTAINER_SERVICE: Final = "kafkalake-maintainer"
"""The Powertools service name: the ``service`` dimension of every maintainer metric."""
RECONCILER_SERVICE: Final = "kafkalake-reconciler"
"""The ``service`` dimension of the reconciler's metrics."""


class ReconcileMetric(StrEnum):
    """What one scheduled reconciliation publishes (dimension ``service``)."""

    PARTITIONS_REPAIRED = "ReconcilePartitionsRepaired"
    """Partitions found on S3 and missing in Glue, now added: non-zero means S3 events were lost."""
    EMPTY_LOCATIONS = "ReconcileEmptyLocations"
    """Glue partitions whose location holds no object."""
    TABLES_FAILED = "ReconcileTablesFailed"


class MaintainerCount(StrEnum):
    """What one maintainer run (a drain) counts; each non-zero count is published as a metric of the same name."""

    RECEIVE_CALLS = "receive_calls"
    MESSAGES = "messages"
    MALFORMED = "malformed"
    DATA_EVENTS = "data_events"
    UNIQUE_OBJECTS = "unique_objects"
    IGNORED_TEST_EVENT = "ignored_test_event"
    IGNORED_REMOVED_OBJECT = "ignored_removed_object"
    IGNORED_OTHER_EVENT = "ignored_other_event"
    IGNORED_NO_OBJECT = "ignored_no_object"
    IGNORED_FOREIGN_KEY = "ignored_foreign_key"
    IGNORED_COMPACTION_OUTPUT = "ignored_compaction_output"
    """Objects the compactor wrote under a table's location (``kafkalake.layout.is_compaction_output``)."""
    IGNORED_UNKNOWN_TABLE = "ignored_unknown_table"
    IGNORED_ICEBERG_FILE = "ignored_iceberg_file"
    """Iceberg's own files under an Iceberg table's location (a rewrite's output): the table, not Glue partitions,
    says which are live."""
    ICEBERG_OBJECTS = "iceberg_objects"
    """The archiver's objects of Iceberg tables: no partition to add and no crawler; tags, and the snapshots read."""
    IGNORED_OTHER_ENVIRONMENT = "ignored_other_environment"
    """Data keys under another environment's prefix: acknowledged, never sent to Glue (nor to a crawler)."""
    GLUE_READS = "glue_reads"
    CRAWLERS_STARTED = "crawlers_started"
    CRAWLERS_ALREADY_RUNNING = "crawlers_already_running"
    CRAWLER_REASON_NEW_TABLE = "crawler_reason_new_table"
    CRAWLER_REASON_NEW_SCHEMA_VERSION = "crawler_reason_new_schema_version"
    DEFERRED_UNTIL_TABLE_EXISTS = "deferred_until_table_exists"
    TABLES_CREATED = "tables_created"
    TABLES_TAGGED = "tables_tagged"
    """Tables whose LF-tags (sensitivity, personal columns) the maintainer attached: new ones, and each again once
    per cache period."""
    TABLES_UPDATED = "tables_updated"
    TABLE_UPDATE_CONFLICTS = "table_update_conflicts"
    """``UpdateTable`` refused (the table changed since it was read, e.g. by an overlapping drain): re-read, re-merged
    and retried."""
    SCHEMA_INCOMPATIBLE = "schema_incompatible"
    CREATE_PARTITION_CALLS = "create_partition_calls"
    PARTITIONS_ADDED = "partitions_added"
    PARTITION_ERRORS = "partition_errors"
    PARTITIONS_COMPLETED = "partitions_completed"
    """Hours found complete: a Hive table's partitions marked complete in Glue, an Iceberg table's hours by its
    snapshots."""
    COMPLETENESS_CLAIMED_ELSEWHERE = "completeness_claimed_elsewhere"
    """Partitions this drain marked complete whose ``PartitionComplete`` event an overlapping drain had claimed: not
    published again."""
    TABLES_FAILED = "tables_failed"
    """Tables whose sync failed in a drain; their messages stay for the next run."""
    TABLE_CACHE_DROPPED = "table_cache_dropped"
    """A table vanished from Glue while cached: its cached entries were dropped and its sync retried."""
    LATE_OBJECTS = "late_objects"
    """Objects that landed in a partition already compacted: invisible until the compactor's next run."""
    EVENTS_FAILED = "events_failed"
    DELETED = "deleted"
    DELETE_FAILED = "delete_failed"
    LEFT_FOR_RETRY = "left_for_retry"
    ERRORS = "errors"
    """Published on every run (also when 0), so an alarm on it sees data."""


MAINTAINER_DASHBOARD_COUNTS: Final = (
    MaintainerCount.MESSAGES,
    MaintainerCount.PARTITIONS_ADDED,
    MaintainerCount.TABLES_CREATED,
    MaintainerCount.CRAWLERS_STARTED,
    MaintainerCount.MALFORMED,
    MaintainerCount.ERRORS,
)
"""The maintainer counts the dashboard graphs."""


class ArchiverMetric(StrEnum):
    """What each archiver run publishes (namespace ``NAMESPACE``)."""

    LAG = "ArchiverLag"
    """Per topic and Kafka partition: high watermark - committed offset after the run."""
    RECORDS_READ = "ArchiverRecordsRead"
    RECORDS_WRITTEN = "ArchiverRecordsWritten"
    RECORDS_QUARANTINED = "ArchiverRecordsQuarantined"
    TOMBSTONES = "ArchiverTombstones"
    LATEST_HOUR = "ArchiverLatestHourWritten"
    """Per topic and Kafka partition: the start of the latest business hour written, in seconds since the epoch."""
    RUN_SECONDS = "ArchiverRunSeconds"
    """Per topic."""
    TOPICS_FAILED = "ArchiverTopicsFailed"
    """Per environment: topics whose run failed."""
    TOTAL_LAG = "ArchiverTotalLag"
    """Per environment: the sum of every topic's lag."""
    RECORDS_HELD = "ArchiverRecordsHeld"
    """Per environment: records of schema versions the catalog lacks, held in the restricted quarantine
    (``kafkalake.undeclared``) until the catalog declares them."""


class ErasureMetric(StrEnum):
    """What each erasure run publishes (namespace ``NAMESPACE``, dimension ``ENVIRONMENT_DIMENSION``)."""

    REQUESTS_LATE = "ErasureRequestsLate"
    """Requests without a receipt past their deadline (``kafkalake.erasure``)."""
    REQUESTS_PENDING = "ErasureRequestsPending"
    """Requests without a receipt, late or not."""


ENVIRONMENT_DIMENSION: Final = "Environment"
GLUE_DATA_AGE: Final = "GlueDataAgeSeconds"
"""The maintainer's freshness metric: at each drain, how old the newest Kafka record is that it made queryable
through Glue; per table (dimensions ``service`` and ``Table``) and the largest of the drain (``service`` only, what
the alarm watches)."""
TABLE_DIMENSION: Final = "Table"


class SchemaDriftMetric(StrEnum):
    """What every scheduled archiver run (and ``kafkalake catalog drift``) publishes per environment
    (``kafkalake.drift``)."""

    UNCATALOGUED_TOPICS = "CatalogUncataloguedTopics"
    """Topics that follow the environment's naming convention and no catalog entry names: never archived."""
    OFF_CONVENTION_TOPICS = "CatalogOffConventionTopics"
    """Topics no catalog entry names that do not follow the convention."""
    MISSING_TOPICS = "CatalogMissingTopics"
    """Catalog entries whose Kafka topic the cluster lacks."""
    MISSING_SCHEMA_VERSIONS = "CatalogMissingSchemaVersions"
    """Registry versions of catalogued topics that the catalog lacks: their records are quarantined."""
