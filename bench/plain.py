"""The compactor benchmarks' baselines (``bench.compactor``): the same partitions read and written plainly, once with
the compactor's committer (each output one Spark task that reads its inputs whole and uploads one Parquet object
under a key it names, from the Python worker with boto3: no S3A, no rename) and once with Spark's own Parquet writer
through S3A (the earlier baseline, whose commit renames: a copy and a delete per file on S3)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from bench.common import say, timed
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.layout import parse_data_key
from spark_jobs.common import worker_s3_client
from spark_jobs.compaction.binning import InputFile, plan_bins
from spark_jobs.compaction.merging import read_object
from spark_jobs.compaction.sizing import estimated_file_count
from spark_jobs.compaction.work import Knobs


@dataclass(frozen=True)
class CopyTask:
    """One output file of the plain read + write: its inputs, read whole, written as one object under ``output``."""

    endpoints: Endpoints
    bucket: str
    inputs: tuple[str, ...]
    output: str


def copy_bin(task: CopyTask) -> int:
    """Read the inputs, upload them as one Parquet object (as the compactor's merge uploads); the rows."""
    s3 = worker_s3_client(task.endpoints)
    table = pa.concat_tables([read_object(s3, task.bucket, key) for key in task.inputs])
    with tempfile.NamedTemporaryFile(suffix=".parquet") as out:
        pq.write_table(table, out.name, compression="snappy")
        s3.upload_file(out.name, task.bucket, task.output)
    return int(table.num_rows)


def warm(_: int) -> None:
    """Nothing: a task that starts a Python worker and loads this module (and the compactor's merge) in it."""


def copy_tasks(endpoints: Endpoints, prefixes: list[str], target: str) -> list[CopyTask]:
    """Per partition (its data prefix), ⌈bytes / target size⌉ outputs of consecutive inputs in key order."""
    s3, tasks = make_client(endpoints, "s3"), []
    for index, prefix in enumerate(prefixes):
        files = []
        for key, size in list_objects(s3, endpoints.bucket, prefix).items():
            parsed = parse_data_key(key)
            low, high = (parsed.kafka_partition, parsed.first_offset), (parsed.kafka_partition, parsed.last_offset)
            files.append(InputFile(key, size, low, high))
        wanted = estimated_file_count(sum(f.size for f in files), Knobs().target_file_bytes)
        for number, chosen in enumerate(plan_bins(sorted(files, key=lambda f: f.low), wanted)):
            output = f"{target}{index}/part-{number:05d}.parquet"
            tasks.append(CopyTask(endpoints, endpoints.bucket, chosen.inputs, output))
    return tasks


def plain_copy(spark: SparkSession, endpoints: Endpoints, prefixes: list[str], rows: int, tag: str) -> dict[str, Any]:
    """The partitions under ``prefixes`` read and written with the compactor's committer (the baseline), timed from
    the listing of its inputs, as the compactor's run is timed from its selection (which lists them): knowing its
    inputs is part of the least a merge can cost."""
    context = spark.sparkContext
    context.parallelize(range(2), 2).map(warm).collect()  # both cores' Python workers up, with this module loaded

    def copy() -> tuple[list[CopyTask], list[int]]:
        tasks = copy_tasks(endpoints, prefixes, f"bench/plain-{tag}/")
        return tasks, context.parallelize(tasks, len(tasks)).map(copy_bin).collect()

    seconds, (tasks, copied) = timed(copy)
    if sum(copied) != rows:
        raise RuntimeError(f"the plain read + write copied {sum(copied)} rows of {rows}")
    say(f"plain read + write, the compactor's committer: {seconds:.1f}s, {len(tasks)} files")
    return {"seconds": seconds, "files": len(tasks)}


def s3a_copy(spark: SparkSession, endpoints: Endpoints, prefixes: list[str], tag: str) -> dict[str, Any]:
    """The partitions under ``prefixes`` read and written with Spark's Parquet writer through S3A (the earlier
    baseline)."""
    sources = [f"s3a://{endpoints.bucket}/{prefix}" for prefix in prefixes]
    target = f"s3a://{endpoints.bucket}/bench/plain-s3a-{tag}/"
    seconds, _ = timed(lambda: spark.read.parquet(*sources).write.parquet(target))
    files = len(spark.read.parquet(target).inputFiles())
    say(f"plain read + write, Spark's writer through S3A: {seconds:.1f}s, {files} files")
    return {"seconds": seconds, "files": files}


def baselines(spark: SparkSession, endpoints: Endpoints, prefixes: list[str], rows: int, tag: str) -> dict[str, Any]:
    """Both plain read + writes of the partitions under ``prefixes``: with the compactor's committer (the baseline)
    and with Spark's Parquet writer through S3A (the earlier baseline)."""
    return {
        "plain_read_write": plain_copy(spark, endpoints, prefixes, rows, tag),
        "plain_read_write_s3a": s3a_copy(spark, endpoints, prefixes, tag),
    }


def ratios(compactor_seconds: float, plain: dict[str, Any]) -> dict[str, float]:
    return {
        "ratio_compactor_to_plain_read_write": compactor_seconds / plain["plain_read_write"]["seconds"],
        "ratio_compactor_to_plain_read_write_s3a": compactor_seconds / plain["plain_read_write_s3a"]["seconds"],
    }
