"""The local stack's services as processes: one this process started and that has exited is not found running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalake_dev.local.stack import Service


def test_an_exited_child_is_not_found_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service this process started and that has exited is a zombie until reaped; ``kill(pid, 0)`` still finds
    it, so ``stop`` would wait its whole timeout for it."""
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    service = Service("sleeper", lambda _folder: [], lambda: True, 5)
    service.pid_file.write_text(str(child.pid))
    assert service.pid() == child.pid
    os.kill(child.pid, signal.SIGKILL)
    stat = Path(f"/proc/{child.pid}/stat")
    while stat.read_text().split()[2] != "Z":  # exited, not yet reaped
        time.sleep(0.05)
    assert service.pid() is None
    service.stop()
    assert not service.pid_file.exists()
