"""The jobs' Python environment is a reproducible asset: the same bytes whichever path it was built from."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

BUILD = "from infra.assets import build_job_environment; print(build_job_environment())"


def test_environment_archive_is_identical_from_two_build_paths(tmp_path: Path) -> None:
    caches = [tmp_path / name / "cache" for name in ("first-machine", "second/machine")]
    builds = [  # the two builds at once: each is a pip install and a pack, mostly waiting on the disk
        subprocess.Popen(
            [sys.executable, "-c", BUILD],
            env={**os.environ, "KAFKALAKE_CACHE": str(cache)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cache in caches
    ]
    digests = []
    for cache, build in zip(caches, builds, strict=True):
        stdout, stderr = build.communicate()
        assert build.returncode == 0, stderr[-3000:]
        archive = Path(stdout.strip().splitlines()[-1])
        assert str(cache) in str(next((cache / "job-environments").glob("*.tar.gz")))
        digests.append(hashlib.sha256(archive.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
