"""The keyed hash (HMAC-SHA256, ``kafkalake.personal``) as a Spark column: no per-row Python.

Spark has SHA-256 but no HMAC, so the column is RFC 2104 spelled out with the key's padded blocks as literals:
``sha256((key ^ opad) || sha256((key ^ ipad) || value))``. It equals ``PseudonymKey.digest`` for every string.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from kafkalake.personal import PseudonymKey


def keyed_hash(key: PseudonymKey, value: Column) -> Column:
    """The keyed hash of ``value`` (cast to string, UTF-8) as 64 lower-case hex characters; null stays null."""
    inner_pad, outer_pad = key.pads()
    text = value.cast("string").cast("binary")
    inner = F.unhex(F.sha2(F.concat(F.lit(inner_pad), text), 256))
    return F.sha2(F.concat(F.lit(outer_pad), inner), 256)
