"""The fleet at full size, at one size or several (``python -m bench fleet``, issues #37 and #54).

One size (BENCH_FULL_TOPICS, 160 by default) is the fleet at full size ``bench.fleet`` describes, into
``fleet-<time>.json``. BENCH_FULL_SIZES (``160,1600``) runs it at each size in turn, in this one process, smallest
first, into ``fleet-scale-<time>.json``: issue #54's "ten times the fleet" (BENCH_FULL_EARLIER adds sizes an earlier
run measured: its partial file). Each size keeps the 160-topic run's shape: one heavy topic in 40 (``heavy_topics``:
4 of 160, 40 of 1,600), the others light, 3 partitions each; each in a throw-away environment of its own, removed after
it (bucket with every object version, queues, Glue databases, event bus, Kafka topics and consumer groups), all on a
moto server of the benchmark's own (``own_moto``, ``bench.fleet_moto``: the stack's, less its walks over whatever a
queue or a bucket holds, which made a 400-topic run wait on moto).

Each of its four steps (archiver run, maintainer drain, compactor run, inventory) is timed, its CPU seconds measured
(the archiver's child's whole process tree, ``run_cpu_seconds`` after its Spark start beside it; the others this
process's tree: the maintainer and the inventory are Python in this process, the compactor's Spark JVM is its child)
with the peak of its driver's memory (the archiver's Python driver and Spark JVM; this process's RSS and its JVM's,
sampled every quarter second), and its AWS calls counted. ``per_topic_ratios`` sets each figure per topic at the
largest size against the smallest: (figure at N ÷ N) ÷ (figure at n ÷ n), issue #54's bar 1.2; peak memory as it is,
not per topic. With BENCH_FULL_COMPACT_TOPICS the larger sizes' compactor compacts only about that many topics' inputs
(``compact_budget``), so its per-topic ratios do not apply. One run per size: no alternated pairs at these sizes (the
1,600-topic size took an hour here, producing included), so no spread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench import fleet
from bench.archiver import archive, forget_offsets
from bench.common import say, write_result
from bench.proc import Peaks, cpu_since, tree_cpu
from kafkalake.aws import make_client
from kafkalake.endpoints import ENV_VARS, Endpoints
from kafkalake.jobspec import ARCHIVER_CONCURRENCY
from kafkalake.topic_catalog import Topic, TopicCatalog
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.checks.inventory import take_inventory
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import environ_with, local_endpoints
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, Provisioned, provision
from kafkalake_dev.local.sandbox import count_calls, isolated_env, with_bucket

SIZES = tuple(int(size) for size in os.environ.get("BENCH_FULL_SIZES", "").split(",") if size.strip())
"""The fleet's sizes, in topics, for one result beside each other (none: BENCH_FULL_TOPICS alone)."""
HEAVY_SHARE = 40
"""One topic in this many is heavy, as 4 of the fleet's 160 are."""
PER_TOPIC_BAR = 1.2
"""Issue #54: cost per topic at the largest size at most this times cost per topic at the smallest."""
STEPS = ("archiver", "maintainer", "compactor", "inventory")
EARLIER = os.environ.get("BENCH_FULL_EARLIER", "")
"""A JSON file of sizes measured earlier (a list of ``one_size`` results: the partial file a run leaves), set beside
this run's sizes."""
COMPACT_TOPICS = int(os.environ.get("BENCH_FULL_COMPACT_TOPICS", "0"))
"""The compactor's budget at a larger size, in topics' worth of inputs (``compact_budget``; 0: the job's default)."""
MOTO_PORT = int(os.environ.get("BENCH_FLEET_MOTO_PORT", "15100"))
"""The port of the benchmark's own moto server (``own_moto``)."""


def heavy_topics(topics: int) -> int:
    """The heavy topics of a fleet of ``topics``: one in HEAVY_SHARE, at least one."""
    return max(1, round(topics / HEAVY_SHARE))


def measured(action: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """What ``action`` returned; its seconds, the CPU seconds of this process's tree while it ran and the peak of
    each memory figure of that tree (``bench.proc``, MiB)."""
    before, started = tree_cpu(), time.monotonic()
    with Peaks(os.getpid()) as peaks:
        value = action()
    seconds, cpu = time.monotonic() - started, cpu_since(before, tree_cpu())
    return value, {"seconds": seconds, "cpu_seconds": cpu, **peaks.mib()}


def inventory(endpoints: Endpoints, topics: list[Topic]) -> dict[str, Any]:
    """``kafkalake inventory``'s reading of every table (``take_inventory``), its calls counted."""
    calls: Counter[str] = Counter()
    s3, glue = (count_calls(make_client(endpoints, service), calls) for service in ("s3", "glue"))
    tables = take_inventory(s3, glue, endpoints.bucket, topics)
    return {
        "tables": len(tables),
        "partitions": sum(len(t.partitions) for t in tables),
        "files": sum(t.files for t in tables),
        "calls": dict(sorted(calls.items())),
    }


def step_figures(name: str, found: dict[str, Any]) -> dict[str, float]:
    """A step's wall seconds, CPU seconds and calls (every service's) from its part of a size's result, and its
    driver's peak memory: the archiver's Python driver and JVM, the others this process's RSS and its JVM's."""
    if name == "archiver":
        seconds, cpu = found["seconds"], found["cpu_seconds"]
        calls = sum(found["driver_calls"].values()) + found["objects"]  # the executors' PUTs: one per object
    else:
        seconds, cpu, calls = found["seconds"], found["cpu_seconds"], sum(found["calls"].values())
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "calls": calls,
        "peak_driver_python_rss_mib": found["peak_driver_python_rss_mib"],
        "peak_jvm_rss_mib": found["peak_jvm_rss_mib"],
    }


def per_topic_ratios(small: dict[str, Any], large: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per step, each figure per topic at ``large`` ÷ the same at ``small`` (peak memory as it is, not per topic)."""
    ratios = {}
    for name in STEPS:
        ours, theirs = step_figures(name, large[name]), step_figures(name, small[name])
        ratios[name] = {
            figure: (value if figure.startswith("peak_") else value / large["topics"])
            / (theirs[figure] if figure.startswith("peak_") else theirs[figure] / small["topics"])
            for figure, value in ours.items()
            if theirs[figure]
        }
    return ratios


def over_bar(ratios: dict[str, dict[str, float]]) -> dict[str, float]:
    """The per-topic figures above PER_TOPIC_BAR, ``step.figure`` → ratio (peak memory is not per topic: left out)."""
    return {
        f"{name}.{figure}": ratio
        for name, figures in ratios.items()
        for figure, ratio in figures.items()
        if not figure.startswith("peak_") and ratio > PER_TOPIC_BAR
    }


def compact_budget(size: int, stored_bytes: int) -> int | None:
    """The compactor's budget at ``size`` topics (``max_bytes_per_run``): with BENCH_FULL_COMPACT_TOPICS, the inputs
    of that many topics' share of the ``stored_bytes`` the archiver wrote, so a large fleet's compaction run selects
    over every table and compacts about as much as a fleet of that size; none (the job's default) otherwise."""
    if not COMPACT_TOPICS or size <= COMPACT_TOPICS:
        return None
    return stored_bytes * COMPACT_TOPICS // size


def scale(sizes: tuple[int, ...]) -> dict[str, Any]:
    """The fleet at each of ``sizes`` (smallest first) after the sizes of EARLIER, and per topic the largest against
    the smallest."""
    runs: list[dict[str, Any]] = json.loads(Path(EARLIER).read_text()) if EARLIER else []
    partial = Path(tempfile.gettempdir()) / "kafkalake-bench-fleet-scale-partial.json"
    for size in sorted(sizes):
        runs.append(one_size(size, heavy_topics(size)))
        partial.write_text(json.dumps(runs, indent=1, default=str))  # what a later size's failure leaves
        say(f"fleet of {size} done: {partial}")
    ratios = per_topic_ratios(runs[0], runs[-1])
    runs.sort(key=lambda run: int(run["topics"]))
    return {
        "sizes": [run["topics"] for run in runs],
        "earlier": EARLIER,
        "runs": runs,
        "per_topic_ratios": ratios,
        "per_topic_bar": PER_TOPIC_BAR,
        "over_bar": over_bar(ratios),
        "pairs": 1,
    }


def one_size(size: int, heavy: int) -> dict[str, Any]:
    """The fleet of ``size`` topics, ``heavy`` of them heavy, in an environment of its own, removed afterwards."""
    env, _, _ = isolated_env(Path(tempfile.mkdtemp(prefix="kafkalake-bench-fleet-")))
    endpoints = with_bucket(local_endpoints(), env.bucket)
    clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
    started = time.monotonic()
    topics, arguments, records = fleet.fleet_topics(endpoints, env.name, size, heavy)
    say(f"fleet of {size}: produced in {time.monotonic() - started:.0f} s")
    provisioned = provision(clients, endpoints.region, env, TopicCatalog(Path("bench"), tuple(topics)))
    try:
        with environ_with({"BENCH_BUCKET": env.bucket}):
            archived = archive(arguments, ArchivePolicy().max_records_per_run, ARCHIVER_CONCURRENCY)
        say(f"archiver over {len(topics)} topics: {archived['seconds']:.1f} s")
        steps = Path(tempfile.gettempdir()) / f"kafkalake-bench-fleet-{size}-steps.json"
        steps.write_text(json.dumps({"archiver": archived}, default=str))
        partitions = fleet.archived_partitions(clients["s3"], env.bucket, topics)
        maintained, figures = measured(lambda: fleet.maintain(endpoints, env, provisioned.queue_url, topics))
        maintained.update(figures)
        say(f"maintainer drain: {maintained['seconds']:.1f} s, {maintained['counts']}")
        steps.write_text(json.dumps({"archiver": archived, "maintainer": maintained}, default=str))
        budget = compact_budget(size, archived["stored_bytes"])
        compacted, figures = measured(lambda: fleet.compact(endpoints, topics, budget))
        compacted.update({**figures, "job_seconds": compacted["seconds"], "max_bytes_per_run": budget})
        say(f"compactor: {compacted['seconds']:.1f} s, {compacted['partitions_compacted']} partitions")
        inventoried, figures = measured(lambda: inventory(endpoints, topics))
        inventoried.update(figures)
        say(f"inventory: {inventoried['seconds']:.1f} s, {inventoried['tables']} tables")
    finally:
        remove(endpoints, clients, provisioned, [argument.partition("=")[0] for argument in arguments])
    walls = {step: found["seconds"] for step, found in zip(STEPS[:3], (archived, maintained, compacted), strict=True)}
    return {
        "topics": len(topics),
        "heavy_topics": heavy,
        "heavy_records": fleet.FULL_HEAVY_RECORDS,
        "light_records": fleet.FULL_LIGHT_RECORDS,
        "records": records,
        "concurrency": ARCHIVER_CONCURRENCY,
        "glue_partitions": sum(partitions.values()),
        "archiver": archived,
        "maintainer": maintained,
        "compactor": compacted,
        "inventory": inventoried,
        **fleet.bounds(archived, maintained, compacted, partitions),
        "share_of_schedule": {job: walls[job] / fleet.SCHEDULE_SECONDS[job] for job in walls},
    }


def remove(endpoints: Endpoints, clients: dict[str, Any], provisioned: Provisioned, kafka_topics: list[str]) -> None:
    """What a size made: its bucket (every version), queues, Glue databases, bus, Kafka topics and consumer groups."""
    s3 = clients["s3"]
    while versions := s3.list_object_versions(Bucket=provisioned.bucket, MaxKeys=1000):  # page by page, from the top
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in versions.get("Versions", []) + versions.get("DeleteMarkers", [])
        ]
        if not doomed:
            break
        s3.delete_objects(Bucket=provisioned.bucket, Delete={"Objects": doomed, "Quiet": True})
    s3.delete_bucket(Bucket=provisioned.bucket)
    for queue in (provisioned.queue_url, provisioned.dlq_url):
        clients["sqs"].delete_queue(QueueUrl=queue)
    for database in provisioned.databases:
        with contextlib.suppress(clients["glue"].exceptions.EntityNotFoundException):
            clients["glue"].delete_database(Name=database)
    clients["events"].delete_event_bus(Name=provisioned.event_bus)
    forget_offsets(endpoints, *kafka_topics)
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for start in range(0, len(kafka_topics), 200):
        for future in admin.delete_topics(kafka_topics[start : start + 200]).values():
            future.result()
    say(f"removed the fleet's bucket, queues, databases, bus and {len(kafka_topics)} Kafka topics")


@contextlib.contextmanager
def own_moto() -> Iterator[str]:
    """A moto server of this benchmark's own (``bench.fleet_moto``) on MOTO_PORT while the block runs, its endpoint
    the benchmark's and its children's (``KAFKALAKE_AWS_ENDPOINT_URL``). Started through a shell that exits at once,
    so it is no child of this process: its CPU and memory are AWS's side, not in the steps' figures."""
    url = f"http://127.0.0.1:{MOTO_PORT}"
    log = Path(tempfile.gettempdir()) / f"kafkalake-bench-fleet-moto-{MOTO_PORT}.log"
    command = f"{sys.executable} -m bench.fleet_moto -H 127.0.0.1 -p {MOTO_PORT} > {log} 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/moto-api/"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fleet's moto server did not answer on {url} within 60 s: see {log}")
            time.sleep(0.5)
        with environ_with({ENV_VARS["aws_endpoint_url"]: url}):
            yield url
    finally:
        os.kill(pid, signal.SIGTERM)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def full() -> None:
    """``python -m bench fleet``: the fleet at each of BENCH_FULL_SIZES into ``fleet-scale-<time>.json``; without
    them at BENCH_FULL_TOPICS alone, into ``fleet-<time>.json``; either on a moto server of its own (``own_moto``)."""
    with stack.running(), own_moto():
        if SIZES:
            write_result("fleet-scale", scale(SIZES))
        else:
            write_result("fleet", one_size(fleet.FULL_TOPICS, fleet.FULL_HEAVY))
