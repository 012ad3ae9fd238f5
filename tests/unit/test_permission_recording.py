"""The permission check's recording and mapping: which principal a call runs as, what the local endpoint records,
and the IAM requests and Glue calls a recorded call maps to (in the deployed environment's terms)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

from kafkalake.jobspec import Job
from kafkalake_dev.checks.permissions.mapping import LocalNames, Unmapped, iam_and_lake_formation
from kafkalake_dev.checks.permissions.requests import GlueCall, IamRequest, key_arn
from kafkalake_dev.local import principals
from kafkalake_dev.local.call_recording import CONTROL_PATH, PRINCIPAL_HEADER, Recorder, recording_app

BUCKET = "arn:aws:s3:::kafkalake-staging-lake"
RESTRICTED_LOCAL = "arn:aws:kms:eu-west-1:123456789012:key/0a1b2c3d-local"


def record(service: str, method: str, path: str, query: str = "", **fields: Any) -> dict[str, Any]:
    return {
        "principal": "archiver",
        "service": service,
        "method": method,
        "path": path,
        "query": query,
        "headers": {},
        "body": "",
        "status": 200,
        "response": {},
        **fields,
    }


def mapped(*records: dict[str, Any]) -> list[IamRequest | GlueCall | Unmapped]:
    return list(iam_and_lake_formation(records, LocalNames(frozenset({RESTRICTED_LOCAL}))))


def actions(items: list[IamRequest | GlueCall | Unmapped]) -> list[tuple[str, str]]:
    return [(i.action, i.resource) for i in items if isinstance(i, IamRequest)]


def test_a_conditional_create_of_an_erasure_request_is_a_put_in_the_deployed_environment() -> None:
    put = record(
        "s3", "PUT", "/kafkalake-local-lake/erasure/t1a2b3c4d/requests/r1.json", headers={"if-none-match": "*"}
    )
    items = mapped(put)
    assert actions(items) == [
        ("s3:PutObject", f"{BUCKET}/erasure/staging/requests/r1.json"),
        ("kms:GenerateDataKey", key_arn("lake")),
    ]
    assert items[0].context == {"s3:if-none-match": "*"}  # type: ignore[union-attr]
    assert items[1].via == "s3"  # type: ignore[union-attr]


def test_a_renewal_with_if_match_also_reads_the_object() -> None:
    renew = record("s3", "PUT", "/b/state/staging/acme/payments/x/lease.json", headers={"if-match": '"e1"'})
    assert ("s3:GetObject", f"{BUCKET}/state/staging/acme/payments/x/lease.json") in actions(mapped(renew))


def test_a_restricted_object_names_the_restricted_key_in_its_condition_and_its_kms_request() -> None:
    put = record(
        "s3",
        "PUT",
        "/b/restricted/quarantine/t1a2b3c4d/acme/crm/c/x.avro",
        headers={
            "x-amz-server-side-encryption": "aws:kms",
            "x-amz-server-side-encryption-aws-kms-key-id": RESTRICTED_LOCAL,
        },
    )
    first, kms = mapped(put)
    assert isinstance(first, IamRequest) and isinstance(kms, IamRequest)
    assert first.resource == f"{BUCKET}/restricted/quarantine/staging/acme/crm/c/x.avro"
    assert first.context["s3:x-amz-server-side-encryption-aws-kms-key-id"] == key_arn("restricted")
    assert (kms.action, kms.resource) == ("kms:GenerateDataKey", key_arn("restricted"))


def test_reads_name_versions_and_the_key_that_encrypted_the_object() -> None:
    got = record(
        "s3",
        "GET",
        "/b/data/staging/x.parquet",
        "versionId=v1",
        response={"x-amz-server-side-encryption-aws-kms-key-id": RESTRICTED_LOCAL},
    )
    head = record("s3", "HEAD", "/b/data/staging/x.parquet")
    assert actions(mapped(got, head)) == [
        ("s3:GetObjectVersion", f"{BUCKET}/data/staging/x.parquet"),
        ("kms:Decrypt", key_arn("restricted")),
        ("s3:GetObject", f"{BUCKET}/data/staging/x.parquet"),  # HEAD needs GetObject, and no key
    ]


def test_delete_objects_is_authorized_per_object_and_version() -> None:
    body = (
        "<Delete><Object><Key>data/t1a2b3c4d/a</Key></Object>"
        "<Object><Key>data/t1a2b3c4d/b</Key><VersionId>v2</VersionId></Object></Delete>"
    )
    assert actions(mapped(record("s3", "POST", "/b/", "delete", body=body))) == [
        ("s3:DeleteObject", f"{BUCKET}/data/staging/a"),
        ("s3:DeleteObjectVersion", f"{BUCKET}/data/staging/b"),
    ]


def test_listings_are_bucket_actions_with_the_prefix() -> None:
    items = mapped(
        record("s3", "GET", "/b/", "list-type=2&prefix=data/t1a2b3c4d/acme/"),
        record("s3", "GET", "/b/", "versions&prefix=data/"),
    )
    assert actions(items) == [("s3:ListBucket", BUCKET), ("s3:ListBucketVersions", BUCKET)]
    assert items[0].context == {"s3:prefix": "data/staging/acme/"}  # type: ignore[union-attr]


def test_a_copy_reads_the_source_and_writes_the_target() -> None:
    copy = record("s3", "PUT", "/b/data/staging/new", headers={"x-amz-copy-source": "/b/data/staging/old"})
    assert actions(mapped(copy))[0] == ("s3:GetObject", f"{BUCKET}/data/staging/old")
    assert ("s3:PutObject", f"{BUCKET}/data/staging/new") in actions(mapped(copy))


def test_a_glue_call_needs_the_catalog_database_and_table_and_is_a_lake_formation_call() -> None:
    body = {
        "DatabaseName": "acme_t1a2b3c4d5",
        "TableName": "refunds",
        "PartitionInputList": [{"StorageDescriptor": {"Location": "s3://kafkalake-local-lake/data/t1a2b3c4d5/x/"}}],
    }
    call = record("glue", "POST", "/", headers={"x-amz-target": "AWSGlue.BatchCreatePartition"}, body=json.dumps(body))
    items = mapped(call)
    base = "arn:aws:glue:eu-west-1:111122223333"
    assert actions(items) == [
        ("glue:BatchCreatePartition", r)
        for r in (f"{base}:catalog", f"{base}:database/acme_staging", f"{base}:table/acme_staging/refunds")
    ]
    assert items[-1] == GlueCall(
        "archiver", "BatchCreatePartition", "acme_staging", "refunds", "s3://kafkalake-staging-lake/data/staging/x/"
    )


def test_queues_and_secrets_bring_the_kms_requests_their_services_make() -> None:
    receive = record("sqs", "POST", "/", headers={"x-amz-target": "AmazonSQS.ReceiveMessage"}, body="{}")
    secret = record(
        "secretsmanager",
        "POST",
        "/",
        headers={"x-amz-target": "secretsmanager.GetSecretValue"},
        body=json.dumps({"SecretId": "kafkalake/local/pseudonym-key"}),
    )
    kms = [i for i in mapped(receive, secret) if isinstance(i, IamRequest) and i.action == "kms:Decrypt"]
    assert [(k.resource, k.via) for k in kms] == [(key_arn("queue"), "sqs"), (key_arn("lake"), "secretsmanager")]


def test_what_the_mapping_does_not_know_is_a_finding() -> None:
    unknown = record("dynamodb", "POST", "/", headers={"x-amz-target": "DynamoDB_20120810.GetItem"}, body="{}")
    odd = record("s3", "PUT", "/b/", "policy")
    assert [type(i) for i in mapped(unknown, odd)] == [Unmapped, Unmapped]


# --- which principal -------------------------------------------------------------------------------------------


def test_the_outermost_package_of_a_principal_names_the_caller() -> None:
    def frame_in(module: str, inner: Any) -> Any:
        return eval("lambda f: f()", {"__name__": module})(inner)

    import sys

    seen = frame_in(
        "spark_jobs.erasure.job",
        lambda: frame_in("spark_jobs.compaction.work", lambda: principals.stack_principal(sys._getframe())),
    )
    assert seen == "erasure"
    assert frame_in("tests.integration.x", lambda: principals.stack_principal(sys._getframe())) is None


def test_a_thread_runs_as_the_principal_that_started_it() -> None:
    principals.install()
    seen: list[str | None] = []
    starter = eval("lambda t: t.start()", {"__name__": "spark_jobs.archiver.topic_run"})
    thread = threading.Thread(target=lambda: seen.append(principals.current_principal()))
    starter(thread)
    thread.join()
    assert seen == ["archiver"]


def test_a_job_run_with_spark_submit_uses_its_principals_key() -> None:
    assert principals.principal_credentials(Job.ERASE)["AWS_ACCESS_KEY_ID"] == "principal-erasure"


# --- the local endpoint's record -------------------------------------------------------------------------------


def call(app: Any, method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        **{f"HTTP_{k.upper()}": v for k, v in headers.items()},
    }
    return b"".join(app(environ, lambda status, headers, *rest: None))


def test_the_endpoint_records_principals_calls_only_while_recording(tmp_path: Path) -> None:
    def moto(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [environ["wsgi.input"].read()]

    app = recording_app(moto, Recorder())
    glue = {
        "AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20261125/eu-west-1/glue/aws4_request, x",
        "X_AMZ_TARGET": "AWSGlue.GetTable",
    }
    tagged = {**glue, PRINCIPAL_HEADER.upper().replace("-", "_"): "maintainer"}
    log = tmp_path / "calls.jsonl"
    call(app, "POST", "/", b"{}", **tagged)  # not recording yet
    call(app, "POST", CONTROL_PATH, str(log).encode())
    assert call(app, "POST", "/", b'{"Name": "t"}', **tagged) == b'{"Name": "t"}'  # the body still reaches moto
    call(app, "POST", "/", b"{}", **glue)  # the tests' own call: no principal
    key = {"AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=principal-archiver/20261125/eu-west-1/s3/aws4_request, x"}
    call(app, "GET", "/bucket/key", b"", **key)
    call(app, "DELETE", CONTROL_PATH)
    call(app, "POST", "/", b"{}", **tagged)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["principal"], r["service"], r["body"]) for r in lines] == [
        ("maintainer", "glue", '{"Name": "t"}'),
        ("archiver", "s3", ""),
    ]
    assert lines[0]["headers"]["x-amz-target"] == "AWSGlue.GetTable"


def test_a_read_answered_404_also_needs_the_listing_that_makes_s3_answer_404_not_403() -> None:
    missing = record("s3", "GET", "/b/state/staging/acme/payments/x/lease.json", status=404)
    found = record("s3", "HEAD", "/b/state/staging/acme/payments/x/lease.json")
    assert actions(mapped(missing)) == [
        ("s3:GetObject", f"{BUCKET}/state/staging/acme/payments/x/lease.json"),
        ("s3:ListBucket", BUCKET),
    ]
    [listing] = [i for i in mapped(missing) if isinstance(i, IamRequest) and i.action == "s3:ListBucket"]
    assert listing.context == {}, "asked without a prefix: a prefix-conditioned grant does not answer it"
    assert actions(mapped(found)) == [("s3:GetObject", f"{BUCKET}/state/staging/acme/payments/x/lease.json")]
