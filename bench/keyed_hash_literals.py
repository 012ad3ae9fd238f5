"""The keyed hash as the jobs computed it before #35 (``git show 985850f^:spark_jobs/keyed_hash.py``), kept only as
the baseline ``bench.hashing`` measures the shipped hash against. Never ship it, never use it outside the benchmark:
it writes the key's padded blocks into the plan as binary literals, so every rendering of a plan that uses it
(``explain``, the Spark UI's SQL tab, the event logs EMR Serverless keeps) holds key material, the privacy defect
``spark_jobs.keyed_hash`` (a JVM function, ``infra/java/KeyedHash.java``) fixed. The jobs' packages
(``infra.assets.JOB_PACKAGES``) do not include ``bench``.

It is RFC 2104 spelled out in Spark expressions, no per-row Python: ``sha256((key ^ opad) || sha256((key ^ ipad) ||
value))``, equal to ``PseudonymKey.digest`` for every string (``tests/unit/test_keyed_hash.py`` checks that it equals
the shipped function). ``installed`` puts it in the archiver's place of the shipped one, in the benchmark's child
process only (``bench.archiver_run``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import Column
from pyspark.sql import functions as F

from kafkalake.personal import PseudonymKey
from spark_jobs.archiver import pseudonyms


def keyed_hash(key: PseudonymKey, value: Column) -> Column:
    """The keyed hash of ``value`` (cast to string, UTF-8) as 64 lower-case hex characters; null stays null."""
    inner_pad, outer_pad = key.pads()
    text = value.cast("string").cast("binary")
    inner = F.unhex(F.sha2(F.concat(F.lit(inner_pad), text), 256))
    return F.sha2(F.concat(F.lit(outer_pad), inner), 256)


SLOT = "keyed_hash"
"""The name under which ``spark_jobs.archiver.pseudonyms`` calls the keyed hash (a global it looks up at each call)."""


def in_place() -> str:
    """The qualified name of the keyed hash the archiver's pseudonyms call now."""
    function = getattr(pseudonyms, SLOT)
    return f"{function.__module__}.{function.__qualname__}"


@contextmanager
def installed() -> Iterator[None]:
    """Within the block, the archiver's pseudonyms (``spark_jobs.archiver.pseudonyms``) use this expression instead
    of the shipped JVM function; the shipped one is back after it."""
    shipped = getattr(pseudonyms, SLOT)
    setattr(pseudonyms, SLOT, keyed_hash)
    try:
        yield
    finally:
        setattr(pseudonyms, SLOT, shipped)
