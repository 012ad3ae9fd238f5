"""The compactor's executor tasks against in-process S3: streamed and sorted merges, the fallback from one to the
other, the digests they report, the inspection of an output, and errors returned rather than raised."""

from __future__ import annotations

import base64
import io
import zlib
from collections.abc import Iterator
from types import SimpleNamespace

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from kafkalake.endpoints import Endpoints
from spark_jobs.common import Run, worker_s3_client
from spark_jobs.compaction.digest import KeyDigest
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.manifest import Manifest, ManifestState
from spark_jobs.compaction.merging import InspectTask, MergeTask, inspect, merge
from spark_jobs.compaction.work import Knobs, Work
from spark_jobs.compaction.write import write

ENDPOINTS = Endpoints("kafka:9092", "http://registry:8081", "eu-west-1", "lake")


@pytest.fixture(autouse=True)
def s3() -> Iterator[object]:
    with mock_aws():
        worker_s3_client.cache_clear()  # a client from another test's mock would not see this one's bucket
        client = boto3.client("s3", region_name="eu-west-1")
        client.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        yield client
        worker_s3_client.cache_clear()


def put(s3: object, key: str, partition: int, offsets: range) -> None:
    table = pa.table(
        {
            "id": [f"{partition}-{o}" for o in offsets],
            "_kafka_partition": pa.array([partition] * len(offsets), pa.int32()),
            "_kafka_offset": pa.array(list(offsets), pa.int64()),
        }
    )
    body = io.BytesIO()
    pq.write_table(table, body)
    s3.put_object(Bucket="lake", Key=key, Body=body.getvalue())  # type: ignore[attr-defined]


def keys_digest(partition: int, offsets: range) -> dict[str, list[int]]:
    return KeyDigest.of(np.full(len(offsets), partition), np.array(list(offsets))).to_json()


def read(s3: object, key: str) -> pa.Table:
    return pq.read_table(io.BytesIO(s3.get_object(Bucket="lake", Key=key)["Body"].read()))  # type: ignore[attr-defined]


def task(inputs: tuple[str, ...], overlapping: bool) -> MergeTask:
    return MergeTask("work", ENDPOINTS, "lake", inputs, "out/part-00000.parquet", overlapping)


def test_ordered_files_are_streamed_and_their_keys_digested(s3: object) -> None:
    put(s3, "a", 0, range(0, 10))
    put(s3, "b", 0, range(10, 20))
    put(s3, "c", 1, range(0, 5))
    outcome = merge(task(("a", "b", "c"), overlapping=False))
    assert (outcome["rows"], outcome["input_rows"], outcome["dropped"]) == (25, {"a": 10, "b": 10, "c": 5}, {})
    expected = KeyDigest.from_json(keys_digest(0, range(20))) + KeyDigest.from_json(keys_digest(1, range(5)))
    assert KeyDigest.from_json(outcome["inputs"]) == expected
    written = read(s3, "out/part-00000.parquet")
    assert written.column("id").to_pylist() == [f"0-{o}" for o in range(20)] + [f"1-{o}" for o in range(5)]
    report = inspect(InspectTask("work", ENDPOINTS, "lake", "out/part-00000.parquet"))
    assert (report["rows"], report["disorder"], report["ranges"]) == (25, None, [[0, 0, 19, 20], [1, 0, 4, 5]])
    assert KeyDigest.from_json(report["digest"]) == expected


def test_a_merge_reads_its_output_back_from_s3_once_uploaded(s3: object) -> None:
    """The merge task's inspection is the stored object's, as a task of its own would report it."""
    put(s3, "a", 0, range(0, 10))
    put(s3, "b", 1, range(0, 5))
    outcome = merge(task(("a", "b"), overlapping=False))
    stored = s3.head_object(Bucket="lake", Key="out/part-00000.parquet")["ContentLength"]  # type: ignore[attr-defined]
    separate = inspect(InspectTask("work", ENDPOINTS, "lake", "out/part-00000.parquet"))
    own = outcome["inspection"]
    assert (own["key"], own["bytes"], own["rows"]) == ("out/part-00000.parquet", stored, 15)
    assert KeyDigest.from_json(own["digest"]) == KeyDigest.from_json(outcome["inputs"])
    assert {k: v for k, v in own.items() if k != "seconds"} == {
        k: v for k, v in separate.items() if k not in ("seconds", "work")
    }


def test_a_merge_inspects_its_output_before_uploading_it_with_its_checksum(s3: object) -> None:
    """The merge reads nothing of its output back from S3: it inspects the local file, and uploads it with the CRC32
    of its bytes, which S3 holds the stored bytes to."""
    put(s3, "a", 0, range(0, 10))
    put(s3, "b", 1, range(0, 5))
    calls: list[tuple[str, dict[str, object]]] = []
    client = worker_s3_client(ENDPOINTS)
    client.meta.events.register(
        "before-parameter-build.s3.*", lambda params, model, **_: calls.append((model.name, dict(params)))
    )
    outcome = merge(task(("a", "b"), overlapping=False))
    assert outcome["inspection"]["rows"] == 15, outcome
    touching = [(name, params) for name, params in calls if params.get("Key") == "out/part-00000.parquet"]
    assert [name for name, _ in touching] == ["PutObject"], touching  # no HeadObject, no GetObject of the output
    assert touching[0][1]["ChecksumAlgorithm"] == "CRC32"
    stored = s3.get_object(Bucket="lake", Key="out/part-00000.parquet", ChecksumMode="ENABLED")  # type: ignore[attr-defined]
    crc32 = base64.b64encode(zlib.crc32(stored["Body"].read()).to_bytes(4, "big")).decode()
    assert stored["ChecksumCRC32"] == crc32  # the stored bytes' checksum: the one the upload sent, of the local file


def test_overlapping_files_are_sorted_and_each_key_kept_once(s3: object) -> None:
    put(s3, "a", 0, range(0, 10))
    put(s3, "late", 0, range(5, 15))
    outcome = merge(task(("a", "late"), overlapping=True))
    assert outcome["rows"] == 15
    assert outcome["dropped"] == keys_digest(0, range(5, 10))
    kept = KeyDigest.from_json(outcome["inputs"]) - KeyDigest.from_json(outcome["dropped"])
    assert kept.to_json() == keys_digest(0, range(15))
    assert read(s3, "out/part-00000.parquet").column("_kafka_offset").to_pylist() == list(range(15))


def test_a_bin_that_turns_out_unordered_falls_back_to_the_sort(s3: object) -> None:
    put(s3, "b", 0, range(10, 20))
    put(s3, "a", 0, range(0, 10))
    outcome = merge(task(("b", "a"), overlapping=False))  # the planner believed them ordered; they are not
    assert (outcome["rows"], outcome["dropped"]) == (20, {})
    assert read(s3, "out/part-00000.parquet").column("_kafka_offset").to_pylist() == list(range(20))


def test_errors_are_returned_as_the_tasks_result(s3: object) -> None:
    put(s3, "a", 0, range(0, 10))
    outcome = merge(task(("a", "gone"), overlapping=False))
    assert "NoSuchKey" in outcome["error"] and outcome["output"] == "out/part-00000.parquet"
    report = inspect(InspectTask("work", ENDPOINTS, "lake", "nothing-here.parquet"))
    assert "error" in report and report["key"] == "nothing-here.parquet"


def test_inspection_finds_the_first_repeated_key(s3: object) -> None:
    put(s3, "out/repeated.parquet", 0, range(3))
    table = pa.concat_tables([read(s3, "out/repeated.parquet")] * 2)
    body = io.BytesIO()
    pq.write_table(table, body)
    s3.put_object(Bucket="lake", Key="out/repeated.parquet", Body=body.getvalue())  # type: ignore[attr-defined]
    report = inspect(InspectTask("work", ENDPOINTS, "lake", "out/repeated.parquet"))
    assert (report["rows"], report["disorder"]) == (6, 3)


def test_a_spark_job_that_fails_reports_each_of_its_tasks_failed() -> None:
    """A lost executor fails the whole Spark job once its retries are spent: every partition of that job is then
    reported failed (and left as it was), instead of the run stopping."""

    def parallelize(*_: object) -> object:
        raise RuntimeError("Job aborted due to stage failure: Python worker exited unexpectedly (crashed)")

    context = SimpleNamespace(setJobDescription=lambda _: None, parallelize=parallelize)
    compactor = Compactor(SimpleNamespace(sparkContext=context), ENDPOINTS, [], Knobs(), run=Run("unit"))  # type: ignore[arg-type]
    outcomes = compactor.tasks(merge, [task(("a",), overlapping=False)], "write")
    assert outcomes == [
        {
            "work": "work",
            "output": "out/part-00000.parquet",
            "key": "",
            "error": "the Spark job failed: RuntimeError: Job aborted due to stage failure: Python worker exited "
            "unexpectedly (crashed)",
        }
    ]


@pytest.mark.parametrize("overlapping", [False, True], ids=["streamed", "sorted"])
def test_erased_keys_are_left_out_and_reported_as_dropped(s3: object, overlapping: bool) -> None:
    put(s3, "a", 0, range(0, 10))
    put(s3, "b", 1, range(0, 5))
    erase = ((0, 3), (1, 4), (7, 7))  # the last one is in no input
    outcome = merge(
        MergeTask("work", ENDPOINTS, "lake", ("a", "b"), "out/part-00000.parquet", overlapping, erase=erase)
    )
    assert (outcome["rows"], outcome["erased"]) == (13, 2)
    dropped = KeyDigest.from_json(keys_digest(0, range(3, 4))) + KeyDigest.from_json(keys_digest(1, range(4, 5)))
    assert KeyDigest.from_json(outcome["dropped"]) == dropped
    written = read(s3, "out/part-00000.parquet")
    assert written.column("id").to_pylist() == [f"0-{o}" for o in range(10) if o != 3] + [f"1-{o}" for o in range(4)]


class _InProcess:
    """A SparkContext whose jobs run their tasks in this process, one after the other."""

    def setJobDescription(self, _: object) -> None:
        pass

    def parallelize(self, items: list[object], _: int) -> SimpleNamespace:
        return SimpleNamespace(map=lambda f: SimpleNamespace(collect=lambda: [f(i) for i in items]))


def in_process_compactor() -> Compactor:
    return Compactor(SimpleNamespace(sparkContext=_InProcess()), ENDPOINTS, [], Knobs(), run=Run("unit"))  # type: ignore[arg-type]


def planned_work(s3: object, *, fresh: bool) -> Work:
    put(s3, "raw/a", 0, range(0, 10))
    put(s3, "raw/b", 0, range(10, 20))
    sizes = {k: s3.head_object(Bucket="lake", Key=k)["ContentLength"] for k in ("raw/a", "raw/b")}  # type: ignore[attr-defined]
    manifest = Manifest(["1", "2026-11-20", "07"], "abc", sizes, "out/run=abc/")
    topic = SimpleNamespace(database="db", table="t")
    return Work(topic, manifest, "state/manifest.json", planned_here=fresh)  # type: ignore[arg-type]


@pytest.mark.parametrize("fresh", [True, False], ids=["planned-by-this-run", "carried-forward"])
def test_only_a_carried_forward_run_directory_is_listed_and_cleared_before_the_write(s3: object, fresh: bool) -> None:
    """A run directory is named after its inputs: one this run planned was never written (no listing); one carried
    forward may hold a crashed attempt's files, which go before the write."""
    compactor = in_process_compactor()
    item = planned_work(s3, fresh=fresh)
    s3.put_object(Bucket="lake", Key="out/run=abc/part-00007.parquet", Body=b"crashed")  # type: ignore[attr-defined]
    listed: list[str] = []
    compactor.s3.meta.events.register(
        "before-parameter-build.s3.ListObjectsV2", lambda params, **_: listed.append(params["Prefix"])
    )
    write(compactor, [item])
    assert item.manifest.state == ManifestState.WRITTEN and not item.failure, item.failure
    assert listed == ([] if fresh else ["out/run=abc/"])
    left = s3.list_objects_v2(Bucket="lake", Prefix="out/run=abc/").get("Contents", [])  # type: ignore[attr-defined]
    assert ("out/run=abc/part-00007.parquet" in {o["Key"] for o in left}) == fresh
