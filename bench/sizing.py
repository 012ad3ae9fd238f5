"""EMR Serverless worker sizes from measured peak memory (pure logic).

Locally one Spark JVM is the driver and the executor at once, beside the Python driver and one Python worker per
core (``bench.proc``). On EMR Serverless the driver's worker holds the Python driver and the driver's JVM, and each
executor's worker holds an executor JVM (its heap is ``spark.executor.memory``) and one Python worker per core
(they live in ``spark.executor.memoryOverhead``). So, conservatively: an executor needs the local JVM's peak (which
also held the driver) plus the local Python workers' peak per core times its cores; the driver needs the local
JVM's peak plus the Python driver's. Both times HEADROOM, rounded up to a size EMR Serverless supports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

HEADROOM = 1.5
"""Over the measured median peak: single runs peak up to ~25% higher (when G1 grows the heap), and a plan of wide
records holds more bytes than the benchmark's ~200-byte records at the same count."""
EXECUTOR_CORES = 4
"""EMR Serverless's default executor size, the compactor's (and the erasure job's): fewer cores per executor means
more JVMs for the same work."""
ARCHIVER_EXECUTOR_CORES = 2
"""The archiver's executors (issue #37): at the default schedule a run lasts under EMR Serverless's one-minute minimum
per worker (``bench.cost.emr_run``), so each worker's size, not the run's work, is the bill; a 2-vCPU executor holds
a plan of ``records_per_plan`` by the measured peaks, and a fleet with more work gets more executors."""
DRIVER_CORES = 2
"""The driver runs no tasks; it plans, keeps leases and collects each plan's outcome rows, a few topics at once."""
WORKER_MEMORY_GB = {1: (2, 8, 1), 2: (4, 16, 1), 4: (8, 30, 1), 8: (16, 60, 4), 16: (32, 120, 8)}
"""vCPU → (minimum, maximum, step) GB of memory, EMR Serverless's supported worker configurations."""
EMR_DEFAULT = {"cpu": 4, "memory_gb": 16}
"""EMR Serverless's driver and executor when a job sets nothing (``spark.*.memory`` 14g plus overhead)."""
MIB_PER_GB = 1024


@dataclass(frozen=True)
class PlanMemory:
    """Median peaks (MiB) of one archiver run at ``records_per_plan``."""

    records_per_plan: int
    jvm_mib: float
    driver_python_mib: float
    workers_python_mib: float
    rss_mib: float

    @classmethod
    def of(cls, records_per_plan: int, run: dict[str, Any]) -> PlanMemory:
        """From a run's peaks (``bench.proc.watched``)."""
        return cls(
            records_per_plan,
            run["peak_jvm_rss_mib"],
            run["peak_driver_python_rss_mib"],
            run["peak_workers_python_rss_mib"],
            run["peak_rss_mib"],
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkerSize:
    cpu: int
    memory_gb: int
    heap_gb: int
    """``spark.{driver,executor}.memory``; the rest of the worker is its memory overhead."""
    needed_mib: float
    """What the measurement calls for, before rounding to a supported size."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EmrSizes:
    records_per_plan: int
    """The largest plan size measured: the sizes hold up to it (the compactor's: the rows it merged)."""
    driver: WorkerSize
    executor: WorkerSize

    def to_dict(self) -> dict[str, Any]:
        return {
            "records_per_plan": self.records_per_plan,
            "driver": self.driver.to_dict(),
            "executor": self.executor.to_dict(),
            "emr_default": EMR_DEFAULT,
        }


def spark_defaults(sizes: dict[str, Any]) -> dict[str, str]:
    """Sizes (``EmrSizes.to_dict``) as Spark settings, EMR Serverless's ``spark-defaults``: each worker's memory is
    its heap plus an overhead that fills it (the Python driver or workers live there)."""
    settings: dict[str, str] = {}
    for role in ("driver", "executor"):
        size = sizes[role]
        settings |= {
            f"spark.{role}.cores": str(size["cpu"]),
            f"spark.{role}.memory": f"{size['heap_gb']}g",
            f"spark.{role}.memoryOverhead": f"{size['memory_gb'] - size['heap_gb']}g",
        }
    return settings


def supported_memory_gb(cpu: int, needed_mib: float) -> int:
    """The smallest memory EMR Serverless supports for ``cpu`` vCPU that holds ``needed_mib``."""
    low, high, step = WORKER_MEMORY_GB[cpu]
    wanted = max(low, math.ceil(needed_mib / MIB_PER_GB))
    rounded = low + math.ceil((wanted - low) / step) * step
    if rounded > high:
        raise ValueError(f"{needed_mib:.0f} MiB do not fit a {cpu}-vCPU worker (at most {high} GB): add cores")
    return rounded


def worker(cpu: int, jvm_mib: float, python_mib: float) -> WorkerSize:
    needed = (jvm_mib + python_mib) * HEADROOM
    memory = supported_memory_gb(cpu, needed)
    heap = max(1, min(memory - 1, math.ceil(jvm_mib * HEADROOM / MIB_PER_GB)))
    return WorkerSize(cpu, memory, heap, round(needed, 1))


def emr_sizes(measured: list[PlanMemory], local_cores: int) -> EmrSizes:
    """Driver and executor sizes for the largest plan size measured, from its peaks (and never below a smaller
    plan's: a peak is a maximum)."""
    return sizes_for(
        max(m.records_per_plan for m in measured),
        max(m.jvm_mib for m in measured),
        max(m.driver_python_mib for m in measured),
        max(m.workers_python_mib for m in measured) / local_cores,
        ARCHIVER_EXECUTOR_CORES,
    )


def archiver_sizes(result: dict[str, Any]) -> dict[str, Any]:
    """The archiver's sizes (``EmrSizes.to_dict``) from an archiver result's peaks per plan size, by this module's
    rules as they stand: a result stores what it measured, the sizes follow the rules (the archiver's executor cores
    among them) without measuring again."""
    measured = [PlanMemory(**m) for m in result["throughput"]["memory_per_plan_size"]]
    return emr_sizes(measured, result["local_cores"]).to_dict()


def sizes_for(
    records_per_plan: int,
    jvm_mib: float,
    driver_python_mib: float,
    python_per_core_mib: float,
    executor_cores: int = EXECUTOR_CORES,
) -> EmrSizes:
    """Driver and executor sizes for a job whose JVM, Python driver and Python worker per core peaked so, its
    executors of ``executor_cores`` vCPU."""
    return EmrSizes(
        records_per_plan,
        worker(DRIVER_CORES, jvm_mib, driver_python_mib),
        worker(executor_cores, jvm_mib, python_per_core_mib * executor_cores),
    )
