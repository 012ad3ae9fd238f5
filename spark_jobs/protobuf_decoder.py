"""Protobuf payloads decoded in the JVM into the table's struct, by ``infra/java/ProtobufDecoder.java``.

Why ours and not Spark's ``from_protobuf``: that lives in the external module spark-protobuf, and Maven Central serves
no spark-protobuf_2.12 of Spark 3.5 (3.4.1 is its only release there: the 3.5.x jars answer 404, tried 3.5.0 to 3.5.9
on 28 Nov 2026), while the jobs run Spark 3.5.3 and download nothing at run time. The decoder is a Catalyst
expression over ``DynamicMessage`` of the protobuf runtime Spark's core jar already carries (relocated as
``org.sparkproject.spark_core.protobuf``): no second protobuf on the classpath, and rows go from the JVM's Kafka read to
the struct with no hop through Python, written as Spark's internal rows, as ``from_avro``'s are. The struct is the one
spark-avro maps the version's rendering to (``kafkalake.protobuf_schema``), so the columns' types are decided in one
place.
"""

from __future__ import annotations

import json

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql.column import _to_java_column
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType


def protobuf_value(payload: Column, descriptor_set: bytes, message: str, struct: DataType) -> Column:
    """Message ``message`` (a full name in ``descriptor_set``, a serialized FileDescriptorSet with every import)
    decoded from ``payload`` (the bytes after the message index) as ``struct``, every level nullable (as from_json's
    and Parquet's are: Spark's Arrow hand-over to the writer refuses a non-nullable field of a null struct); null
    for bytes that do not parse."""
    struct = nullable(struct)
    context = SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("protobuf_value needs an active Spark session")
    jvm = context._jvm
    assert jvm is not None
    decoded = jvm.kafkalake.jobs.ProtobufDecoder.column(
        _to_java_column(payload), bytearray(descriptor_set), message, json.dumps(struct.jsonValue())
    )
    return Column(decoded)


def nullable(data_type: DataType) -> DataType:
    """``data_type`` with every field, element and map value nullable, at any depth."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, nullable(data_type.valueType), True)
    return data_type
