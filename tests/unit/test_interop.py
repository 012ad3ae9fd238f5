"""The interop check's pure parts: Trino's configuration from the endpoints, the counts it asks for and their
plan (before and after erasure), the comparison, the counts taken during compaction, the table it prints, and the
HTTP protocol against a stand-in on the loopback interface."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rich.console import Console

from infra.repo import catalog_dir
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.checks.interop import (
    Check,
    Counted,
    InteropReport,
    Read,
    checks_for,
    count_sql,
    removed_rows,
    sampled_during,
)
from kafkalake_dev.cli.render import interop_results, samples
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
    total = produced.expected.total()
    assert whole == Check(f"{topic.database}.{topic.table}", "count(*)", count_sql(source), total, total)
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


def test_after_erasure_the_same_filters_plan_what_the_erased_records_leave() -> None:
    topic = staging_topic("refund-issued")
    produced = tally(topic, plan_workload(topic, 400, start=START, hours=6))
    whole, hour, version = checks_for(topic, produced)
    assert (whole.planned_after_erasure, hour.planned_after_erasure) == (whole.planned, hour.planned)
    in_hour = sorted(i for i, p in produced.good.items() if p.values()[1:] == [v for _, v in hour.partition])
    newest = sorted(
        i for i, p in produced.good.items() if p.schema_version == max(v.schema_version for v in produced.expected)
    )
    erased = {*in_hour[:3], *newest[-2:]}
    after = checks_for(topic, produced, erased)
    assert [(c.label, c.sql, c.planned) for c in after] == [(c.label, c.sql, c.planned) for c in (whole, hour, version)]
    erased_whole, erased_hour, erased_version = after
    assert erased_whole.planned_after_erasure == whole.planned - len(erased)
    assert erased_hour.planned_after_erasure == hour.planned - len(erased & set(in_hour))
    assert erased_version.planned_after_erasure == version.planned - len(erased & set(newest))
    assert erased_hour.planned_after_erasure < hour.planned and erased_version.planned_after_erasure < version.planned


def agreeing(planned: int = 5, left: int = 4, *, whole: bool = True) -> Counted:
    """A check whose every count agrees: before, during and after compaction, after erasure, the receipts and the
    other readers."""
    check = Check("db.t", "count(*)" if whole else "x = 1", "SELECT 1", planned, left, iceberg=True)
    return Counted(
        check,
        before=planned,
        during=[planned, planned],
        after=planned,
        erased=left,
        removed=planned - left if whole else None,
        readers={"pyiceberg": Read(left, 0), "spark sql": Read(left, 0)},
    )


@pytest.mark.parametrize(
    ("change", "matches"),
    [
        ({}, True),
        ({"before": 4}, False),
        ({"after": 6}, False),
        ({"before": None}, False),
        ({"after": None}, False),
        ({"during": []}, False),
        ({"during": [5, 6, 5]}, False),
        ({"during": [5, None]}, False),
        ({"erased": 5}, False),
        ({"erased": None}, False),
        ({"removed": 2}, False),
        ({"readers": {"pyiceberg": Read(4, 0), "spark sql": Read(5, 0)}}, False),
        ({"readers": {"pyiceberg": Read(4, 1)}}, False),
        ({"readers": {}}, True),
    ],
)
def test_a_check_matches_only_when_every_count_equals_its_plan(change: dict[str, Any], matches: bool) -> None:
    assert dataclasses.replace(agreeing(), **change).matches is matches


def test_a_filtered_check_has_no_receipt_to_agree_with() -> None:
    assert agreeing(whole=False).matches
    assert InteropReport("476", [agreeing(), agreeing(whole=False)]).matches
    assert not InteropReport("476").matches, "a report that counted nothing matches nothing"


def test_the_receipts_removed_rows_are_summed_per_table_over_every_request() -> None:
    receipts = {
        "person": {"tables": {"a.x": {"rows_removed": 1}, "b.y": {"rows_removed": 1}}},
        "tombstones-1": {"tables": {"b.y": {"rows_removed": 3}}},
        "tombstones-2": {"tables": {"b.y": {"rows_removed": 2}}},
    }
    assert removed_rows(receipts) == {"a.x": 1, "b.y": 6}
    assert removed_rows({})["a.x"] == 0


class Counting:
    """Trino's stand-in for ``sampled_during``: each query's answer from ``answers`` (SQL → count, or an error)."""

    def __init__(self, answers: dict[str, int | Exception]) -> None:
        self.answers = answers
        self.queries = 0

    def count(self, sql: str) -> int:
        self.queries += 1
        answer = self.answers[sql]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_counts_are_taken_again_and_again_while_the_block_runs_and_stop_when_it_ends() -> None:
    failing = TrinoError("ICEBERG_CANNOT_OPEN_SPLIT", "gone", "SELECT 3")
    unanswered = TimeoutError("timed out")
    client = Counting({"SELECT 1": 5, "SELECT 2": 7, "SELECT 3": failing, "SELECT 4": unanswered})
    counted = [Counted(Check("db.t", label, f"SELECT {label}", 5, 5)) for label in ("1", "2", "3", "4")]
    with sampled_during(client, counted, pause=0.01):
        deadline = time.monotonic() + 10
        while len(counted[-1].during) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    taken = client.queries
    time.sleep(0.1)
    assert client.queries == taken, "a count was taken after the block ended"
    assert len(counted[-1].during) >= 3, "an error does not end the sampling"
    assert [set(c.during) for c in counted] == [{5}, {7}, {None}, {None}]
    compacted = [dataclasses.replace(c, before=5, after=5) for c in counted]
    assert [c.compaction_matches for c in compacted] == [True, False, False, False]
    assert [c.errors for c in counted[2:]] == [[str(failing)], [str(unanswered)]], (
        "an error seen again is recorded once"
    )


def test_a_block_too_short_for_any_count_leaves_no_sample_and_no_match() -> None:
    counted = [Counted(Check("db.t", "count(*)", "SELECT 1", 5, 5)) for _ in range(3)]

    class Slow(Counting):
        def count(self, sql: str) -> int:
            time.sleep(0.2)
            return super().count(sql)

    with sampled_during(Slow({"SELECT 1": 5}), counted, pause=0.01):
        pass
    assert all(len(c.during) <= 1 for c in counted)
    assert not all(dataclasses.replace(c, before=5, after=5).compaction_matches for c in counted)


def test_samples_show_each_distinct_count_with_its_number_of_samples() -> None:
    assert samples([]) == "no sample"
    assert samples([5, 5, 5]) == "5 (3 samples)"
    assert samples([5, None, 4, 5]) == "4 (1 sample), 5 (2 samples), error (1 sample)"


def test_the_printed_tables_show_every_moment_and_each_verdict() -> None:
    late = dataclasses.replace(agreeing(whole=False), during=[5, 6])
    doubled = dataclasses.replace(agreeing(), readers={"pyiceberg": Read(4, 0), "spark sql": Read(5, 1)})
    report = InteropReport("476", [doubled, late], compacted={"db.t": "3 files rewritten (Iceberg)"})
    console = Console(width=400)  # one line per row: the columns' titles unfolded
    printed = []
    for results in interop_results(report):
        with console.capture() as captured:
            console.print(results)
        printed.append([line.split("\u2502")[1:-1] for line in captured.get().splitlines() if "\u2502" in line])
    around, after = ([[cell.strip() for cell in row] for row in rows] for rows in printed)
    assert around == [
        ["db.t", "count(*)", "5", "5", "5 (2 samples)", "5", "3 files rewritten (Iceberg)", "yes"],
        ["", "x = 1", "5", "5", "5 (1 sample), 6 (1 sample)", "5", "", "NO"],
    ]
    assert after == [
        ["db.t", "count(*)", "4", "4", "4", "5 (1 duplicates)", "1", "NO"],
        ["", "x = 1", "4", "4", "4", "4", "", "yes"],
    ]


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
