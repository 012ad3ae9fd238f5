"""The benchmarks' own logic: the process-tree walk (B1m) and the plans of the Spark-alone floor."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.proc import MEMORY_FIGURES, tree_sample
from bench.spark_alone import plans

STARTS_FROM_A_THREAD = """
import subprocess, sys, threading
def start():
    child = subprocess.Popen([sys.executable, "-c", "import time; data = bytearray(64 << 20); time.sleep(60)"])
    print(child.pid, flush=True)
    sys.stdin.read()  # the thread lives on (a thread's children pass to another thread when it ends)
thread = threading.Thread(target=start)
thread.start()
thread.join()
"""


def test_a_child_started_from_a_thread_is_in_the_tree() -> None:
    """As the Spark JVM starts Spark's Python daemon: from a thread that is not the main one, and lives on."""
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTS_FROM_A_THREAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.5)  # the child's 64 MiB are touched
        memory, cpu = tree_sample(parent.pid)
        alone, _ = tree_sample(child)
    finally:
        subprocess.run(["kill", str(child)], check=True)
        parent.communicate("")
    assert set(cpu) == {parent.pid, child}
    assert set(memory) == set(MEMORY_FIGURES)
    assert alone["rss"] >= 64 * 1024  # KiB
    assert memory["rss"] > alone["rss"] and memory["pss"] > alone["pss"]
    assert memory["jvm_rss"] == 0  # no JVM here


def test_the_spark_alone_plans_advance_each_partition_by_its_share_to_its_end() -> None:
    assert plans([5, 3, 4], 6) == [([0, 0, 0], [2, 2, 2]), ([2, 2, 2], [4, 3, 4]), ([4, 3, 4], [5, 3, 4])]
    assert plans([0, 0, 0], 6) == []
