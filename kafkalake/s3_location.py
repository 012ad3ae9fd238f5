"""Where an object is, as S3 and its events say it: a bucket and a key (``S3Location``), ``s3://`` URIs, keys as
event notifications carry them, and the notification filter that lets only data objects notify. What the keys
themselves are is ``kafkalake.layout``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote_plus

from kafkalake.layout import DATA_ROOT, LayoutError

NOTIFICATION_PREFIX: Final = f"{DATA_ROOT}/"
NOTIFICATION_SUFFIX: Final = ".parquet"
"""Only data objects notify the maintainer: the filter of the S3 event notification (local and CDK)."""


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key (or key prefix). The jobs read and write ``s3://`` URIs, as Glue holds them: EMRFS (or, from
    emr-7.10, S3A) on EMR Serverless; S3A locally (``fs.s3.impl``)."""

    bucket: str
    key: str

    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def as_prefix(self) -> str:
        """The key as a folder prefix (one trailing slash)."""
        return self.key.rstrip("/") + "/"


def s3_uri(bucket: str, key: str) -> str:
    return S3Location(bucket, key).uri()


def parse_s3_uri(uri: str) -> S3Location:
    """``s3://``, ``s3a://`` or ``s3n://`` URI → bucket and key; raise ``LayoutError`` for anything else."""
    match = re.fullmatch(r"s3[an]?://([^/]+)/?(.*)", uri)
    if match is None:
        raise LayoutError(f"{uri!r} is not an s3:// URI")
    return S3Location(match.group(1), match.group(2))


def notification_filter() -> dict[str, Any]:
    """The S3 notification key filter (boto3 shape); the CDK stack uses the same two constants."""
    rules = [{"Name": "prefix", "Value": NOTIFICATION_PREFIX}, {"Name": "suffix", "Value": NOTIFICATION_SUFFIX}]
    return {"Key": {"FilterRules": rules}}


def decode_event_key(raw: str) -> str:
    """Decode a key as S3 event notifications carry it (``+`` is a space, ``%XX`` escapes)."""
    return unquote_plus(raw)
