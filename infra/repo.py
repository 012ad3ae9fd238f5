"""Where the repository's sources are, and the download cache outside the clone (build time only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Downloads (jars, registry, wheels, the job environment) live here, outside the clone, so fresh clones reuse
    them: ``$KAFKALAKE_CACHE`` or ``~/.cache/kafkalake``."""
    return Path(os.environ.get("KAFKALAKE_CACHE", Path.home() / ".cache" / "kafkalake")).expanduser()


def environments_file() -> Path:
    """``environments.yaml`` at the repository root, or the file ``KAFKALAKE_ENVIRONMENTS`` names."""
    return Path(os.environ.get("KAFKALAKE_ENVIRONMENTS", REPO_ROOT / "environments.yaml"))


def catalog_dir() -> Path:
    return REPO_ROOT / "catalog"
