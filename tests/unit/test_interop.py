"""The interop check's pure parts: Trino's configuration from the endpoints, the counts it asks for and their
plan, the comparison, and the HTTP protocol against a stand-in on the loopback interface."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from infra.repo import catalog_dir
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.checks.interop import Check, Counted, checks_for, count_sql
from kafkalake_dev.local.endpoints import DEFAULTS
from kafkalake_dev.local.trino import TrinoClient, TrinoError, hive_catalog, properties, server_config
from kafkalake_dev.local.workload import plan_workload, tally

START = datetime(2026, 3, 1, 6, tzinfo=UTC)


def staging_topic(name: str) -> Topic:
    [topic] = [t for t in load_topic_catalog(catalog_dir()).for_env("staging") if t.name == name]
    return topic


def test_the_hive_catalog_reads_glue_and_s3_at_the_local_endpoint() -> None:
    catalog = hive_catalog(DEFAULTS, access_key="key")
    assert catalog == {
        "connector.name": "hive",
        "hive.metastore": "glue",
        "hive.metastore.glue.region": "eu-west-1",
        "hive.metastore.glue.endpoint-url": "http://127.0.0.1:15000",
        "hive.metastore.glue.aws-access-key": "key",
        "hive.metastore.glue.aws-secret-key": "key",
        "fs.native-s3.enabled": "true",
        "s3.endpoint": "http://127.0.0.1:15000",
        "s3.region": "eu-west-1",
        "s3.path-style-access": "true",
        "s3.aws-access-key": "key",
        "s3.aws-secret-key": "key",
    }
    assert properties({"a": "1", "b.c": "x=y"}) == "a=1\nb.c=x=y\n"


def test_the_hive_catalog_refuses_endpoints_without_a_local_endpoint() -> None:
    with pytest.raises(ValueError, match="aws_endpoint_url"):
        hive_catalog(dataclasses.replace(DEFAULTS, aws_endpoint_url=None))


def test_the_server_is_one_node_that_runs_its_own_queries() -> None:
    config = server_config(18082, catalog_dir())
    assert config["coordinator"] == config["node-scheduler.include-coordinator"] == "true"
    assert config["http-server.http.port"] == "18082"
    assert config["discovery.uri"] == "http://127.0.0.1:18082"


def test_checks_count_the_whole_table_the_busiest_hour_and_the_newest_version() -> None:
    topic = staging_topic("card-authorized")
    produced = tally(topic, plan_workload(topic, 400, start=START, hours=6))
    whole, hour, version = checks_for(topic, produced)
    source = f'"{topic.database}"."{topic.table}"'
    assert whole == Check(f"{topic.database}.{topic.table}", "count(*)", count_sql(source), produced.expected.total())
    per_hour: dict[tuple[str, str], int] = {}
    for partition, rows in produced.expected.items():
        key = (partition.values()[1], partition.values()[2])
        per_hour[key] = per_hour.get(key, 0) + rows
    dt, hour_value = next(k for k, n in sorted(per_hour.items()) if n == max(per_hour.values()))
    assert hour.label == f"dt = '{dt}' AND hour = '{hour_value}'"
    assert hour.sql == f"SELECT count(*) FROM {source} WHERE {hour.label}"
    assert hour.planned == max(per_hour.values())
    newest = max(p.schema_version for p in produced.expected)
    assert version.sql == f"SELECT count(*) FROM {source} WHERE schema_version = {newest}"
    assert version.planned == sum(n for p, n in produced.expected.items() if p.schema_version == newest)


def test_kept_tombstones_count_in_the_whole_table_and_are_left_out_of_filtered_counts() -> None:
    topic = staging_topic("shipment-events")
    assert topic.spec.tombstones == "keep"
    produced = tally(topic, plan_workload(topic, 400, start=START, hours=6))
    assert produced.counts["tombstones"] > 0
    whole, hour, version = checks_for(topic, produced)
    assert whole.planned == produced.expected.total() + produced.counts["tombstones"]
    for check in (hour, version):
        assert check.sql.endswith(' AND NOT coalesce("_tombstone", false)')


@pytest.mark.parametrize(
    ("before", "after", "matches"), [(5, 5, True), (4, 5, False), (5, 6, False), (None, 5, False), (5, None, False)]
)
def test_a_check_matches_only_when_both_counts_equal_the_plan(
    before: int | None, after: int | None, matches: bool
) -> None:
    assert Counted(Check("db.t", "count(*)", "SELECT 1", 5), before, after).matches is matches


@pytest.fixture
def stand_in() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A loopback HTTP server that answers each request with the next of the pages the test puts in its list."""
    pages: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(pages.pop(0)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], pages
    server.shutdown()


def test_the_client_follows_next_uris_and_retries_while_the_node_registers(
    stand_in: tuple[int, list[dict[str, Any]]],
) -> None:
    port, pages = stand_in
    base = f"http://127.0.0.1:{port}/v1/statement/executing/q"
    not_yet = {"error": {"errorName": "NO_NODES_AVAILABLE", "message": "No nodes available to run query"}}
    pages += [{"nextUri": f"{base}/1"}, not_yet, {"nextUri": f"{base}/2"}, {"nextUri": f"{base}/3"}, {"data": [[42]]}]
    assert TrinoClient(port).count("SELECT count(*) FROM t", retry_seconds=10) == 42
    assert pages == []


def test_the_client_raises_a_query_error_with_its_name(stand_in: tuple[int, list[dict[str, Any]]]) -> None:
    port, pages = stand_in
    pages += [{"error": {"errorName": "TABLE_NOT_FOUND", "message": "Table 'hive.a.b' does not exist"}}]
    with pytest.raises(TrinoError, match=r"TABLE_NOT_FOUND: Table 'hive\.a\.b' does not exist") as raised:
        TrinoClient(port).count("SELECT count(*) FROM a.b")
    assert raised.value.name == "TABLE_NOT_FOUND"
