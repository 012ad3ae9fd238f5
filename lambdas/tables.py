"""The catalog's tables as the Lambdas read them: ``tables.json``, bundled in this package by the stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafkalake.settings import SettingsError

LAMBDAS_DIR = Path(__file__).parent


def read_tables(tables_file: str) -> list[dict[str, Any]]:
    """The tables document at ``tables_file`` (relative to the ``lambdas`` package); a missing file is an error,
    never 'no tables'."""
    path = LAMBDAS_DIR / tables_file
    if not path.is_file():
        raise SettingsError(f"{path} is missing: the Lambda bundle must carry the catalog's tables")
    document: list[dict[str, Any]] = json.loads(path.read_text())
    return document
