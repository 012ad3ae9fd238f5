"""The jobs' Python environment is a reproducible asset: the same bytes whichever path it was built from."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

BUILD = "from infra.assets import build_job_environment; print(build_job_environment())"


def test_environment_archive_is_identical_from_two_build_paths(tmp_path: Path) -> None:
    digests = []
    for name in ("first-machine", "second/machine"):
        cache = tmp_path / name / "cache"
        built = subprocess.run(
            [sys.executable, "-c", BUILD],
            env={**os.environ, "KAFKALAKE_CACHE": str(cache)},
            capture_output=True,
            text=True,
            check=True,
        )
        archive = Path(built.stdout.strip().splitlines()[-1])
        assert str(cache) in str(next((cache / "job-environments").glob("*.tar.gz")))
        digests.append(hashlib.sha256(archive.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
