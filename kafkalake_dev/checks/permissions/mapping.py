"""From the local endpoint's record of a call (``kafkalake_dev.local.call_recording``) to what AWS would authorize:
the IAM requests (action, resource, condition keys) per the Service Authorization Reference and the S3 and Glue
rules in docs/testing.md, including the KMS requests S3, Secrets Manager and SQS make on the caller's behalf, and the
Glue calls Lake Formation decides, all in the deployed environment's terms (``requests.DEPLOYED``).

A call this module cannot map is a finding of its own (``Unmapped``), never skipped: the check must see every call.
Past ~400 lines because it is one table of rules, service by service, that a reader checks against the reference
side by side; split per service it would scatter the shared renaming into deployed terms.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, unquote

from kafkalake.layout import NON_DATA_ROOTS, RESTRICTED_ROOT
from kafkalake_dev.checks.permissions.requests import (
    DEPLOYED,
    Deployment,
    GlueCall,
    IamRequest,
    KeyName,
    Principal,
    SecretName,
    bus_arn,
    key_arn,
    queue_arn,
    secret_arn,
)

ENV_ROOTS: Final = ("data", *NON_DATA_ROOTS)
"""Every key under these roots names its environment next (``kafkalake.layout``), or, under ``restricted/``, after
the next folder."""
SSE_KEY: Final = "x-amz-server-side-encryption-aws-kms-key-id"
GLUE_TABLE_KEYS: Final = ("TableName", "Name")
LISTING_PARAMETERS: Final = frozenset(
    {
        "list-type",
        "prefix",
        "delimiter",
        "max-keys",
        "continuation-token",
        "start-after",
        "marker",
        "encoding-type",
        "fetch-owner",
    }
)
"""The query parameters of ListObjects(V2): a GET on the bucket with only these lists it."""


@dataclass(frozen=True)
class Unmapped:
    """A recorded call the mapping does not know: the check fails on it until the mapping learns it."""

    principal: str
    call: str
    reason: str

    def message(self) -> str:
        return f"{self.principal}: {self.call}: not mapped to IAM actions ({self.reason}); teach {__name__}"


@dataclass(frozen=True)
class LocalNames:
    """What the local stack calls the things the template creates."""

    restricted_key_arns: frozenset[str] = frozenset()
    """The local restricted key (its ARN and id); any other key an object names is the lake key's stand-in."""
    queue_name: str = "kafkalake-staging-notifications"
    """The deployed notifications queue (environments.yaml ``queue_name``): the one queue a principal reads."""
    table_databases: Mapping[str, str] = field(default_factory=dict)
    """The deployed environment's tables (Glue table name → its database, from the catalog), for the tests that give
    a topic a database of their own."""
    where: Deployment = DEPLOYED


def deployed_key(key: str, where: Deployment) -> str:
    """An object key of a test environment (``test<hex>``, any env) as the deployed environment's."""
    parts = key.split("/")
    at = 2 if key.startswith(f"{RESTRICTED_ROOT}/") else 1
    if len(parts) > at and parts[0] in ENV_ROOTS and parts[at]:
        parts[at] = where.env
    return "/".join(parts)


TEST_ENV_SUFFIX: Final = re.compile(r"_[a-z]{0,4}[0-9a-f]{6,}$|_staging$|_production$")
"""A database's environment suffix (``kafkalake.naming.default_names``: ``<company>_<env>``); the tests' environments
are a letter or a word and hex digits (``t1a2b3c4d``, ``test1a2b3c4d``)."""


def deployed_database(database: str, table: str | None, names: LocalNames) -> str:
    """A test's database as the deployed one: its environment suffix replaced; for a database the deployed catalog
    lacks, the catalog's database of the table, or, for a table of a test's own catalog, the catalog's first
    database (the templates grant the pipeline the same on every database of the catalog, so the test's tables are
    evaluated as one of them)."""
    candidate = TEST_ENV_SUFFIX.sub(f"_{names.where.env}", database)
    known = sorted(set(names.table_databases.values()))
    if candidate in known or not known:
        return candidate
    if table is not None and table in names.table_databases:
        return names.table_databases[table]
    return known[0]


def object_arn(key: str, where: Deployment) -> str:
    return f"arn:{where.partition}:s3:::{where.bucket}/{deployed_key(key, where)}"


def bucket_arn(where: Deployment) -> str:
    return f"arn:{where.partition}:s3:::{where.bucket}"


def s3_location(uri: str, where: Deployment) -> str:
    """``s3://<any bucket>/<key>`` in the deployed bucket (and environment)."""
    match = re.match(r"s3a?://[^/]+/?(.*)", uri)
    return f"s3://{where.bucket}/{deployed_key(match.group(1), where)}" if match else uri


def iam_and_lake_formation(
    records: Iterable[dict[str, Any]], names: LocalNames
) -> Iterator[IamRequest | GlueCall | Unmapped]:
    for record in records:
        try:
            yield from map_record(record, names)
        except (KeyError, ValueError, ET.ParseError) as exc:
            yield Unmapped(record.get("principal", "?"), describe(record), f"{type(exc).__name__}: {exc}")


def describe(record: dict[str, Any]) -> str:
    target = record.get("headers", {}).get("x-amz-target", "")
    return f"{record.get('service')} {record.get('method')} {record.get('path')}?{record.get('query')} {target}".strip()


def map_record(record: dict[str, Any], names: LocalNames) -> Iterator[IamRequest | GlueCall | Unmapped]:
    service = record["service"]
    if service == "s3":
        yield from s3_requests(record, names)
        return
    operation, body = operation_of(record)
    mapper = SERVICES.get(service)
    if mapper is None:
        yield Unmapped(record["principal"], describe(record), f"no rule for the service {service!r}")
        return
    yield from mapper(record["principal"], operation, body, names)


def operation_of(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(API operation, parameters) of a JSON (``X-Amz-Target``) or query (``Action=``) protocol call."""
    target = record["headers"].get("x-amz-target", "")
    if target:
        return target.rsplit(".", 1)[-1], json.loads(record["body"] or "{}")
    if record["path"].startswith("/") and record["service"] in REST_JSON:
        return REST_JSON[record["service"]](record)
    params = dict(parse_qsl(record["body"] or record["query"]))
    return params.pop("Action"), params


# --- S3 ---------------------------------------------------------------------------------------------------------


def s3_requests(record: dict[str, Any], names: LocalNames) -> Iterator[IamRequest | GlueCall | Unmapped]:
    principal: Principal = record["principal"]
    path = record["path"].encode("latin-1").decode("utf-8")  # WSGI's PATH_INFO is decoded as latin-1
    key = path.lstrip("/").partition("/")[2]
    query = dict(parse_qsl(record["query"], keep_blank_values=True))
    method = record["method"]
    if not key:
        yield from s3_bucket_requests(record, names, principal, query)
    elif method in ("GET", "HEAD"):
        yield from s3_reads(record, names, principal, key, query)
    elif method == "DELETE":
        uploads = "uploadId" in query
        action = "s3:AbortMultipartUpload" if uploads else versioned("s3:DeleteObject", query)
        call = "s3.AbortMultipartUpload" if uploads else "s3.DeleteObject"
        yield IamRequest(principal, action, object_arn(key, names.where), call=call)
    elif method in ("PUT", "POST"):
        yield from s3_writes(record, names, principal, key, query)
    else:
        yield Unmapped(principal, describe(record), f"method {method}")


def versioned(action: str, query: dict[str, str]) -> str:
    """``s3:GetObject`` → ``s3:GetObjectVersion`` (and alike) for a request naming a version."""
    return action.replace("Object", "ObjectVersion", 1) if "versionId" in query else action


def s3_bucket_requests(
    record: dict[str, Any], names: LocalNames, principal: Principal, query: dict[str, str]
) -> Iterator[IamRequest | Unmapped]:
    operation, action, context = bucket_operation(record["method"], query, names.where)
    if action is None:
        yield Unmapped(principal, describe(record), "bucket sub-resource")
    elif operation == "DeleteObjects":  # authorized per object
        for item, version in deleted_objects(record["body"]):
            deletion = "s3:DeleteObjectVersion" if version else "s3:DeleteObject"
            yield IamRequest(principal, deletion, object_arn(item, names.where), call="s3.DeleteObjects")
    else:
        yield IamRequest(principal, action, bucket_arn(names.where), context, call=f"s3.{operation}")


def s3_reads(
    record: dict[str, Any], names: LocalNames, principal: Principal, key: str, query: dict[str, str]
) -> Iterator[IamRequest]:
    target = object_arn(key, names.where)
    if "uploadId" in query:
        yield IamRequest(principal, "s3:ListMultipartUploadParts", target, call="s3.ListParts")
    elif "tagging" in query:
        yield IamRequest(principal, versioned("s3:GetObjectTagging", query), target, call="s3.GetObjectTagging")
    else:
        operation = "GetObject" if record["method"] == "GET" else "HeadObject"
        yield IamRequest(principal, versioned("s3:GetObject", query), target, call=f"s3.{operation}")
        if operation == "GetObject" and record["status"] < 300:  # HEAD reads no bytes: no KMS request
            yield kms_via_s3(principal, operation, "kms:Decrypt", read_key(record, names), names.where)
        if record["status"] == 404:
            # S3 answers a missing key with 404 only to a caller that may list the bucket, with 403 to any other
            # (GetObject and HeadObject, "Permissions", in the Amazon S3 API reference), and the code that reads
            # a key which may not exist (a lease, a manifest, a claim) tells the two apart. The listing is asked
            # without a prefix: a statement conditioned on s3:prefix does not match it (an assumption: AWS does
            # not document the request context of this check).
            yield IamRequest(principal, "s3:ListBucket", bucket_arn(names.where), call=f"s3.{operation} (404)")


def bucket_operation(
    method: str, query: dict[str, str], where: Deployment
) -> tuple[str, str | None, dict[str, str | list[str]]]:
    """(operation, IAM action, condition keys) of a request on the bucket itself."""
    if method == "POST" and "delete" in query:
        return "DeleteObjects", "s3:DeleteObject", {}
    if method in ("GET", "HEAD") and "versions" in query:
        return "ListObjectVersions", "s3:ListBucketVersions", prefix_context(query, where)
    if method in ("GET", "HEAD") and "uploads" in query:
        return "ListMultipartUploads", "s3:ListBucketMultipartUploads", {}
    if method == "GET" and "location" in query:
        return "GetBucketLocation", "s3:GetBucketLocation", {}
    if method == "HEAD" or (method == "GET" and set(query) <= LISTING_PARAMETERS):
        listing = "ListObjectsV2" if "list-type" in query else "ListObjects"
        return listing, "s3:ListBucket", prefix_context(query, where)
    return f"{method} bucket ?{'&'.join(sorted(query))}", None, {}


def prefix_context(query: dict[str, str], where: Deployment) -> dict[str, str | list[str]]:
    return {"s3:prefix": deployed_key(query.get("prefix", ""), where)} if "prefix" in query else {}


def deleted_objects(body: str) -> Iterator[tuple[str, bool]]:
    """(key, whether a version id is named) of each object a DeleteObjects request lists."""
    root = ET.fromstring(body)  # noqa: S314 - the local endpoint's record of our own request
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] == "Object":
            fields = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in element}
            yield fields["Key"], bool(fields.get("VersionId"))


def s3_writes(
    record: dict[str, Any], names: LocalNames, principal: Principal, key: str, query: dict[str, str]
) -> Iterator[IamRequest | GlueCall | Unmapped]:
    where, headers = names.where, record["headers"]
    target = object_arn(key, where)
    if "tagging" in query:
        yield IamRequest(principal, "s3:PutObjectTagging", target, call="s3.PutObjectTagging")
        return
    if "uploadId" in query and record["method"] == "POST":
        yield IamRequest(principal, "s3:PutObject", target, call="s3.CompleteMultipartUpload")
        return
    operation = "CreateMultipartUpload" if "uploads" in query else "UploadPart" if "uploadId" in query else "PutObject"
    source = headers.get("x-amz-copy-source")
    if source:
        operation = "CopyObject" if operation == "PutObject" else "UploadPartCopy"
        source_key, _, version = unquote(source).lstrip("/").partition("/")[2].partition("?versionId=")
        read = "s3:GetObjectVersion" if version else "s3:GetObject"
        yield IamRequest(principal, read, object_arn(source_key, where), call=f"s3.{operation}")
        yield kms_via_s3(principal, operation, "kms:Decrypt", names_key(None, names), where)
    context: dict[str, str | list[str]] = {}
    if operation in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        if "x-amz-server-side-encryption" in headers:
            context["s3:x-amz-server-side-encryption"] = headers["x-amz-server-side-encryption"]
        if SSE_KEY in headers:
            context[f"s3:{SSE_KEY}"] = key_arn(names_key(headers[SSE_KEY], names), where)
        if "if-none-match" in headers:
            context["s3:if-none-match"] = headers["if-none-match"]
        if "if-match" in headers:
            context["s3:if-match"] = headers["if-match"]
    yield IamRequest(principal, "s3:PutObject", target, context, call=f"s3.{operation}")
    if "if-match" in headers:  # a conditional write on an existing object's ETag also needs to read it
        yield IamRequest(principal, "s3:GetObject", target, call=f"s3.{operation}")
    if "x-amz-tagging" in headers:
        yield IamRequest(principal, "s3:PutObjectTagging", target, call=f"s3.{operation}")
    if record["status"] < 300 or record["status"] == 412:
        written = names_key(headers.get(SSE_KEY) or record["response"].get(SSE_KEY), names)
        yield kms_via_s3(principal, operation, "kms:GenerateDataKey", written, where)
        if operation == "UploadPart":
            yield kms_via_s3(principal, operation, "kms:Decrypt", written, where)


def names_key(local_key: str | None, names: LocalNames) -> KeyName:
    """The template key a local key id stands for: the restricted key, or the lake key (the bucket's default)."""
    if local_key and any(local_key == k or local_key.endswith(k) for k in names.restricted_key_arns):
        return "restricted"
    return "lake"


def read_key(record: dict[str, Any], names: LocalNames) -> KeyName:
    return names_key(record["response"].get(SSE_KEY), names)


def kms_via_s3(principal: Principal, operation: str, action: str, key: KeyName, where: Deployment) -> IamRequest:
    """The KMS request S3 makes for an SSE-KMS object on the caller's behalf (``kms:ViaService``)."""
    context: dict[str, str | list[str]] = {"kms:ViaService": f"s3.{where.region}.amazonaws.com"}
    return IamRequest(principal, action, key_arn(key, where), context, call=f"s3.{operation}", via="s3")


# --- JSON and query protocol services ---------------------------------------------------------------------------


def glue(principal: Principal, operation: str, body: dict[str, Any], names: LocalNames) -> Iterator[Any]:
    """Glue: ``glue:<Operation>`` on the catalog, the database and the table (every ancestor of the resource), and
    the call as Lake Formation sees it."""
    where = names.where
    base = f"arn:{where.partition}:glue:{where.region}:{where.account}"
    call = f"glue.{operation}"
    if operation in ("StartCrawler", "GetCrawler", "StopCrawler", "UpdateCrawler"):
        database, _, table_name = body["Name"].removeprefix("kafkalake-").rpartition("-")
        crawler = f"kafkalake-{deployed_database(database, table_name, names)}-{table_name}"
        yield IamRequest(principal, f"glue:{operation}", f"{base}:crawler/{crawler}", call=call)
        return
    table = None
    if operation in ("CreateTable", "UpdateTable"):
        table = body["TableInput"]["Name"]
    elif "DatabaseName" in body:
        table = next((body[k] for k in GLUE_TABLE_KEYS if k in body), None)
    database = deployed_database(body["DatabaseName"], table, names) if "DatabaseName" in body else None
    if operation in ("GetTables", "SearchTables"):
        table = "*"
    resources = [f"{base}:catalog"]
    if database is not None:
        resources.append(f"{base}:database/{database}")
    if table is not None:
        resources.append(f"{base}:table/{database}/{table}")
    for resource in resources:
        yield IamRequest(principal, f"glue:{operation}", resource, call=call)
    if database is not None:
        yield GlueCall(principal, operation, database, None if table == "*" else table, glue_location(body, where))


def glue_location(body: dict[str, Any], where: Deployment) -> str | None:
    """The S3 location a call points a table or partition at (the first, for a batch), in deployed terms."""
    inputs = [
        body.get("TableInput"),
        body.get("PartitionInput"),
        *body.get("PartitionInputList", []),
        *(entry.get("PartitionInput") for entry in body.get("Entries", []) if isinstance(entry, dict)),
    ]
    for item in inputs:
        location = (item or {}).get("StorageDescriptor", {}).get("Location")
        if location:
            return s3_location(location, where)
    return None


def sqs(principal: Principal, operation: str, body: dict[str, Any], names: LocalNames) -> Iterator[IamRequest]:
    """SQS on the notifications queue (the only queue a principal reads), and the queue key SQS uses for it."""
    where = names.where
    queue = queue_arn(names.queue_name, where)
    yield IamRequest(principal, f"sqs:{operation.removesuffix('Batch')}", queue, call=f"sqs.{operation}")
    if operation == "ReceiveMessage":
        context: dict[str, str | list[str]] = {"kms:ViaService": f"sqs.{where.region}.amazonaws.com"}
        yield IamRequest(
            principal, "kms:Decrypt", key_arn("queue", where), context, call="sqs.ReceiveMessage", via="sqs"
        )


def secretsmanager(
    principal: Principal, operation: str, body: dict[str, Any], names: LocalNames
) -> Iterator[IamRequest]:
    where = names.where
    secret: str = body["SecretId"]
    name: SecretName = "pseudonym" if "pseudonym" in secret else "kafka"
    yield IamRequest(
        principal, f"secretsmanager:{operation}", secret_arn(name, where), call=f"secretsmanager.{operation}"
    )
    if name == "pseudonym":  # the generated secret is encrypted with the lake key (infra.constructs.personal)
        context: dict[str, str | list[str]] = {"kms:ViaService": f"secretsmanager.{where.region}.amazonaws.com"}
        yield IamRequest(
            principal,
            "kms:Decrypt",
            key_arn("lake", where),
            context,
            call=f"secretsmanager.{operation}",
            via="secretsmanager",
        )


def cloudwatch(principal: Principal, operation: str, body: dict[str, Any], names: LocalNames) -> Iterator[IamRequest]:
    namespace = body.get("Namespace", "")
    context: dict[str, str | list[str]] = {"cloudwatch:namespace": namespace} if namespace else {}
    yield IamRequest(principal, f"cloudwatch:{operation}", "*", context, call=f"cloudwatch.{operation}")


def events(principal: Principal, operation: str, body: dict[str, Any], names: LocalNames) -> Iterator[IamRequest]:
    yield IamRequest(principal, f"events:{operation}", bus_arn(names.where), call=f"events.{operation}")


def lakeformation(
    principal: Principal, operation: str, body: dict[str, Any], names: LocalNames
) -> Iterator[IamRequest | GlueCall]:
    """Lake Formation's API: ``lakeformation:<Operation>`` (no resource-level permissions: ``*``); tagging a table is
    also a Glue call Lake Formation decides (ASSOCIATE on the tags)."""
    yield IamRequest(principal, f"lakeformation:{operation}", "*", call=f"lakeformation.{operation}")
    resource = body.get("Resource", {})
    table = resource.get("Table") or resource.get("TableWithColumns")
    database = resource.get("Database")
    if table:
        name = table.get("Name")
        yield GlueCall(principal, operation, deployed_database(table["DatabaseName"], name, names), name)
    elif database:
        yield GlueCall(principal, operation, deployed_database(database["Name"], None, names))


def lakeformation_operation(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Lake Formation is a REST-JSON API: the operation is the path (``/AddLFTagsToResource``)."""
    return record["path"].strip("/").split("/")[0], json.loads(record["body"] or "{}")


SERVICES: Final[dict[str, Any]] = {
    "glue": glue,
    "sqs": sqs,
    "secretsmanager": secretsmanager,
    "monitoring": cloudwatch,
    "events": events,
    "lakeformation": lakeformation,
}
"""By the service name of the request's signature (CloudWatch signs as ``monitoring``)."""
REST_JSON: Final = {"lakeformation": lakeformation_operation}
