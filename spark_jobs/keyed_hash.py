"""The keyed hash (HMAC-SHA256, ``kafkalake.personal``) as a Spark column, with no key material in any plan.

Spark has SHA-256 but no HMAC, and any key-derived value written into an expression (a literal of the key or of
its padded blocks) is printed by every rendering of the plan: ``explain``, the SQL tab of the Spark UI and the
event logs EMR Serverless keeps. So the hash is a JVM function, ``infra/java/KeyedHash.java``, shipped with the
jobs' jars (``infra.assets.connector_jars``) and built from the key here: the key is a field of the function
object, which reaches the executors inside the serialized task, while the plan names the function only
(``keyed_hash(cast(...))``). It runs in the JVM, row by row without Python workers, and equals
``PseudonymKey.digest`` for every string (``digest_bytes`` for a binary column).
"""

from __future__ import annotations

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql.column import _to_java_column, _to_seq

from kafkalake.personal import PseudonymKey


def keyed_hash(key: PseudonymKey, value: Column) -> Column:
    """The keyed hash of ``value`` (cast to string, UTF-8; a binary column's own bytes) as 64 lower-case hex
    characters; null stays null."""
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("keyed_hash needs an active Spark session")
    jvm = context._jvm
    assert jvm is not None
    function = jvm.kafkalake.jobs.KeyedHash.function(bytearray(key.secret))
    text = value.cast("string").cast("binary")
    return Column(function.apply(_to_seq(context, [text], _to_java_column)))
