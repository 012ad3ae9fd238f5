"""Exactness side by side (``bench.peer``): each side drains the same topic into a table of its own while it is
SIGKILLed BENCH_PEER_KILLS (default 3) times at random moments (seeded: BENCH_PEER_SEED) and restarted; then its
table's rows and duplicate (partition, offset) pairs are counted.

- The peer: the Connect worker's JVM killed KILL_AFTER seconds (at random in that range) after the sink resumed (its
  task holding partition 0 started the commit coordinator: ``RESUMED`` in the worker's log; at most RESUME_WAIT
  seconds after the worker's REST API answered) and restarted as the same worker (its group, its config, offset and
  status topics, the sink's control topic), so the sink resumes from what it committed; after the last restart it
  drains, and SETTLE_COMMITS more commit intervals pass before the table is counted (a duplicate commit comes late).
  Timed from the sink's resumption, not the worker's start: at Connect's defaults a restarted worker's tasks get
  their partitions only once the killed consumers' sessions (45 s) have expired, and a kill before that would find
  nothing in flight.
- kafkalake: the archiver child's process group (its Python driver, Spark JVM and Python workers) killed
  ARCHIVER_KILL_AFTER seconds after it started, in plans of a tenth of the topic, then run again on the same table
  until it is caught up (a run that finds the killed run's lease not yet stale skips the topic and is run again).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import connect
from bench.archiver import forget_offsets
from bench.peer_archive import json_topic
from bench.peer_tables import DATABASE, KAFKALAKE_COLUMNS, PEER_COLUMNS, table_figures, table_records
from kafkalake.endpoints import Endpoints

KILLS = int(os.environ.get("BENCH_PEER_KILLS", "3"))
SEED = int(os.environ.get("BENCH_PEER_SEED", "55"))
KILL_AFTER = (3.0, 20.0)
ARCHIVER_KILL_AFTER = (14.0, 30.0)
SETTLE_COMMITS = 3
RESUMED = "Committer received leader partition. Starting Coordinator."
RESUME_WAIT = 150.0


def peer_with_kills(
    endpoints: Endpoints,
    topic: str,
    records: int,
    folder: Path,
    *,
    kills: int,
    rng: random.Random,
    commit_seconds: float,
    wait_seconds: float = 180,
) -> dict[str, Any]:
    """The sink from ``topic`` into a new table, its worker killed ``kills`` times and restarted; the moments of the
    kills (seconds after the sink resumed, how long after the worker answered it resumed (None: not within
    RESUME_WAIT), and the table's rows then) and the table's figures once settled."""
    worker = connect.Worker(endpoints, folder)
    table = f"{DATABASE}.peer_kills_{uuid.uuid4().hex[:8]}"
    killed: list[dict[str, float | None]] = []
    worker.start()
    try:
        worker.sink(worker.name, topic, table, commit_seconds=commit_seconds, tasks=connect.TASKS)
        for number in range(1, kills + 1):
            resumed = resumption(worker.log, number, RESUME_WAIT)
            after = rng.uniform(*KILL_AFTER)
            time.sleep(after)
            worker.kill()
            rows = table_records(endpoints, table)
            killed.append({"after_seconds": after, "resumed_after_seconds": resumed, "rows_then": rows})
            worker.start()
        settle(lambda: table_records(endpoints, table), records, commit_seconds * SETTLE_COMMITS, wait_seconds)
    finally:
        worker.stop()
    return {
        "kills": killed,
        "table": table,
        "connect_defaults": worker.connect_defaults,
        "worker_log": str(worker.log),
        "commit_log": commit_log(worker.log, worker.name),
        "control": worker.control_state(worker.name, topic, table),
        **table_figures(endpoints, table, PEER_COLUMNS),
    }


COMMIT_LOG = ("Kafka Connect started", "Starting Coordinator", "Starting commit worker", "Sending event", "Commit ")
"""The worker log's lines that tell the sink's commits: each start, its coordinator and commit workers, the events
they send, the coordinator's commits."""


def commit_log(log: Path, connector: str) -> list[str]:
    """The lines of ``COMMIT_LOG`` in the worker's ``log``, and where the coordinator's control-topic consumer (group
    ``connect-<connector>-coord``) joined and started reading."""
    coordinator = f"groupId=connect-{connector}-coord]"
    return [
        line
        for line in log.read_text(errors="replace").splitlines()
        if any(part in line for part in COMMIT_LOG)
        or (coordinator in line and any(part in line for part in ("offset", "joined", "Adding newly")))
    ]


def resumption(log: Path, starts: int, wait_seconds: float) -> float | None:
    """Seconds until the worker's ``log`` holds its ``starts``-th ``RESUMED`` line (None: not within
    ``wait_seconds``)."""
    started = time.monotonic()
    while time.monotonic() - started < wait_seconds:
        if log.read_text(errors="replace").count(RESUMED) >= starts:
            return time.monotonic() - started
        time.sleep(0.5)
    return None


def settle(rows: Callable[[], int], records: int, quiet_seconds: float, wait_seconds: float) -> None:
    """Wait until ``rows()`` reaches ``records`` (or ``wait_seconds`` pass: a loss shows in the count), then
    ``quiet_seconds`` more."""
    deadline = time.monotonic() + wait_seconds
    while rows() < records and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(quiet_seconds)


def kafkalake_with_kills(
    endpoints: Endpoints, topic: str, records: int, *, kills: int, rng: random.Random, attempts: int = 10
) -> dict[str, Any]:
    """The archiver on ``topic`` into a new table, killed ``kills`` times and run again until caught up; the
    moments of the kills (seconds after the child started; None: it finished first) and the table's figures."""
    forget_offsets(endpoints, topic)
    per_run, env = max(records // 10, 1), f"t{uuid.uuid4().hex[:8]}"
    target = json_topic(topic, per_run, env)
    table = f"{target.database}.{target.table}"
    killed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "bench.peer_archive", f"{folder}/result.json", str(per_run), topic, env]
        for _ in range(kills):
            after = rng.uniform(*ARCHIVER_KILL_AFTER)
            child = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL)
            try:
                child.wait(after)
                killed.append({"after_seconds": None, "exit": child.returncode})
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                killed.append({"after_seconds": after, "rows_then": table_records(endpoints, table)})
        runs: list[dict[str, Any] | None] = []
        while table_records(endpoints, table) < records and len(runs) < attempts:
            finished = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
            runs.append(json.loads(Path(folder, "result.json").read_text()) if finished.returncode == 0 else None)
    figures = table_figures(endpoints, table, KAFKALAKE_COLUMNS)
    return {"kills": killed, "runs_after": runs, "table": table, **figures}


def side_by_side(endpoints: Endpoints, topic: str, records: int, folder: Path, commit_seconds: float) -> dict[str, Any]:
    """Both sides' kill-and-restart runs on the same topic, with the same seed."""
    return {
        "kills": KILLS,
        "seed": SEED,
        "peer": peer_with_kills(
            endpoints, topic, records, folder, kills=KILLS, rng=random.Random(SEED), commit_seconds=commit_seconds
        ),
        "kafkalake": kafkalake_with_kills(endpoints, topic, records, kills=KILLS, rng=random.Random(SEED)),
    }
