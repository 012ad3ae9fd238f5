"""A benchmark child's process tree, read from /proc: the memory of each part (the Python driver, the Spark JVM,
Spark's Python daemon and workers) and the CPU seconds each process has used. ``Peaks`` samples a tree every quarter
second while a block runs and keeps every figure's peak; ``watched`` runs a child so.

Locally the Spark JVM is the driver and the executor at once; on EMR Serverless the driver's worker holds the Python
driver and a JVM, each executor's worker a JVM and the Python workers of its cores (``bench.sizing``)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

MEMORY_FIGURES = ("rss", "pss", "jvm_rss", "driver_python_rss", "workers_python_rss")
"""Sampled over the tree, in KiB: the RSS summed, the PSS summed (shared pages counted once), the Spark JVM's RSS,
the root's RSS (the Python driver), the RSS of every other process (Spark's Python daemon and workers)."""
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def tree_sample(root: int) -> tuple[dict[str, int], dict[int, float]]:
    """MEMORY_FIGURES of ``root`` and all its descendants, in KiB, and the CPU seconds each has used so far. Children
    are listed per thread: the JVM starts Spark's Python daemon (and so every Python worker) from one of its threads,
    never from its main thread."""
    memory, cpu, pending = dict.fromkeys(MEMORY_FIGURES, 0), {}, [root]
    while pending:
        pid = pending.pop()
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            threads = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:  # ended while sampled
            continue
        pending += [child for task in threads for child in thread_children(task)]
        rss = _rollup_kib(rollup, "Rss")
        memory["rss"] += rss
        memory["pss"] += _rollup_kib(rollup, "Pss")
        part = "jvm_rss" if command == "java" else "driver_python_rss" if pid == root else "workers_python_rss"
        memory[part] += rss
        cpu[pid] = (int(stat[11]) + int(stat[12])) / TICKS_PER_SECOND  # utime + stime, all threads
    return memory, cpu


def thread_children(task: Path) -> list[int]:
    """The children a thread (``/proc/PID/task/TID``) started; none once it has ended, as the JVM's threads do all
    along (its process stays in the sample: skipping it lost the JVM's CPU from a run's figure)."""
    try:
        return [int(child) for child in (task / "children").read_text().split()]
    except OSError:
        return []


def _rollup_kib(rollup: str, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+)", rollup, re.MULTILINE)
    return int(match.group(1)) if match else 0


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the tree used between two samples: each process's growth (a process started in between counts
    from zero; one that ended in between is lost, which Spark's reused Python workers make rare)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def tree_cpu() -> dict[int, float]:
    """This process's tree's CPU seconds so far, per process (what a child reports around its timed part)."""
    return tree_sample(os.getpid())[1]


class Peaks:
    """The peak of each MEMORY_FIGURES over a process tree and the last CPU seconds of each of its processes,
    sampled every quarter second by a thread while a ``with`` block runs."""

    def __init__(self, root: int, alive: Callable[[], bool] = lambda: True) -> None:
        self.root, self.alive = root, alive
        self.kib, self.cpu = dict.fromkeys(MEMORY_FIGURES, 0), dict[int, float]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._stop.is_set() and self.alive():
            memory, used = tree_sample(self.root)
            self.kib.update({name: max(self.kib[name], value) for name, value in memory.items()})
            self.cpu.update(used)
            self._stop.wait(0.25)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> dict[str, float]:
        return {f"peak_{name}_mib": kib / 1024 for name, kib in self.kib.items()}


def watched(command: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[dict[str, float], float]:
    """Run ``command`` to its end (with ``env`` added to this process's environment); the peak of each
    MEMORY_FIGURES (MiB, each its own peak) over its tree and the CPU seconds its tree used (the last sample of each
    process)."""
    child = subprocess.Popen(list(command), env=None if env is None else {**os.environ, **env})
    with Peaks(child.pid, lambda: child.poll() is None) as peaks:
        child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"benchmark child {command[:3]} exited with {child.returncode}")
    return peaks.mib(), sum(peaks.cpu.values())
