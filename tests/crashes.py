"""Crash injection through seams: the production code has no test hooks, the tests patch its collaborators.

Spark's Python workers unpickle what the driver sends them, so this module is pickled by value (the workers need
not import it).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

import pytest
from pyspark import cloudpickle

from kafkalake.lease import STALE_WITHIN
from spark_jobs.compaction.manifest import ManifestState, ManifestStore

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

POLL_SECONDS = 0.25
"""How often a kill watches the progress of the run it is due to kill."""


class InjectedCrash(RuntimeError):
    """What an injected crash raises."""


def crash(point: str) -> Callable[..., NoReturn]:
    def raiser(*_: Any, **__: Any) -> NoReturn:
        raise InjectedCrash(f"injected crash at {point}")

    return raiser


def _mid_write(patch: pytest.MonkeyPatch, archiver: ModuleType) -> None:
    """Each of the plan's tasks writes one object, then crashes."""

    class CrashingWriter(archiver.PlanWriter):  # type: ignore[name-defined,misc]
        objects = 0

        def _flush(self, group: Any) -> None:
            if self.objects == 1:
                raise InjectedCrash("injected crash after 1 object")
            self.objects += 1
            super()._flush(group)

    patch.setattr(archiver, "PlanWriter", CrashingWriter)


CRASH_POINTS: dict[str, Callable[[pytest.MonkeyPatch, ModuleType], None]] = {
    "after_plan": lambda patch, archiver: patch.setattr(archiver, "carry_out", crash("after_plan")),
    "mid_write": _mid_write,
    "after_write": lambda patch, archiver: patch.setattr(archiver.Offsets, "commit", crash("after_write")),
    "after_commit": lambda patch, archiver: patch.setattr(archiver.PlanLease, "finish", crash("after_commit")),
}
"""The archiver's crash points: after the plan is stored, after one object, after every object, after the commit."""


def crash_after_saving(patch: pytest.MonkeyPatch, state: ManifestState) -> None:
    """The compactor crashes right after its manifest reaches ``state`` in S3."""
    save = ManifestStore.save

    def saving(store: ManifestStore, key: str, manifest: Any) -> None:
        save(store, key, manifest)
        if manifest.state == state:
            raise InjectedCrash(f"injected crash after {state}")

    patch.setattr(ManifestStore, "save", saving)


class DeletesThenCrash:
    """An S3 client that crashes after ``deletes`` DeleteObject calls and passes everything else through."""

    def __init__(self, s3: Any, deletes: int) -> None:
        self._s3, self._left = s3, deletes

    def delete_object(self, **kwargs: Any) -> Any:
        if self._left == 0:
            raise InjectedCrash("injected crash in the middle of deleting")
        self._left -= 1
        return self._s3.delete_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


@dataclass(frozen=True)
class Kill:
    """SIGKILL a run ``delay`` seconds after it made ``steps`` steps of progress of its own."""

    steps: int
    delay: float


def random_kills(seed: int, steps: range, count: int = 3, most_delay: float = 2.0) -> list[Kill]:
    """``count`` kills, each after a random number of steps drawn from ``steps`` and up to ``most_delay`` s more."""
    draw = random.Random(seed)
    return [Kill(draw.choice(steps), round(draw.uniform(0, most_delay), 2)) for _ in range(count)]


def kill_on_progress(
    command: Sequence[str],
    environ: Mapping[str, str],
    progress: Callable[[], int],
    kills: Sequence[Kill],
    *,
    lease_ttl: float,
) -> int:
    """Start ``command`` once per kill and SIGKILL its whole process group (Spark's JVM included) when the kill is
    due by ``progress()`` (the work all runs left in S3 so far); how many were killed. After a kill it waits
    ``lease_ttl`` seconds and S3's clock resolution (``kafkalake.lease.STALE_WITHIN``), so the leases the killed run
    held are stale for the next run (a run skips what a live-looking run holds). A run that ends before its kill is
    due did all the work left, so the later kills are not tried: whether a kill drawn late still finds work depends
    on how fast the earlier runs went, so a test can count on its first kill landing (drawn early in a large amount
    of work), not on how many of the others do.

    A kill keyed to the run's own progress lands in the middle of its work however long Spark takes to start."""
    killed = 0
    for kill in kills:
        child = subprocess.Popen(
            command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        due = progress() + kill.steps
        while child.poll() is None and progress() < due:
            time.sleep(POLL_SECONDS)
        try:
            child.wait(timeout=kill.delay)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            killed += 1
            time.sleep(lease_ttl + STALE_WITHIN.total_seconds())
        else:
            break
    return killed
