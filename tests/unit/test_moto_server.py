"""The local stack's moto server lists object versions as moto does, without copying their bytes."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.s3 import models as s3_models

from kafkalake_dev.local.moto_server import versions_without_bytes


def listing(s3: Any) -> list[tuple[Any, ...]]:
    pages = s3.get_paginator("list_object_versions").paginate(
        Bucket="lake", Prefix="a/", PaginationConfig={"PageSize": 2}
    )
    return [
        (kind, v["Key"], v["VersionId"], v["IsLatest"], v.get("Size"), v.get("ETag"))
        for page in pages
        for kind in ("Versions", "DeleteMarkers")
        for v in page.get(kind, [])
    ]


def test_versions_are_listed_as_moto_lists_them(monkeypatch: pytest.MonkeyPatch) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="eu-west-1")
        s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        s3.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
        for key, bodies in {"a/1": [b"x", b"yy"], "a/2": [b"zzz"], "b/3": [b"w"]}.items():
            for body in bodies:
                s3.put_object(Bucket="lake", Key=key, Body=body)
        s3.delete_object(Bucket="lake", Key="a/2")  # a delete marker
        by_moto = listing(s3)
        with monkeypatch.context() as patch:
            patch.setattr(s3_models, "copy", SimpleNamespace(copy=copy.copy, deepcopy=versions_without_bytes))
            ours = listing(s3)
        again = listing(s3)  # the stored versions are as they were: moto's own listing is unchanged
    assert len(by_moto) == 4 and {k for k, *_ in by_moto} == {"Versions", "DeleteMarkers"}
    assert ours == by_moto == again


def test_a_copy_shares_the_bytes_and_leaves_the_original_alone() -> None:
    closed = []

    class Version:
        def __init__(self) -> None:
            self.value, self.is_latest = bytearray(b"bytes"), False

        def __del__(self) -> None:
            closed.append(self.value)

    original = Version()
    [twin] = versions_without_bytes([original])
    twin.is_latest = True
    assert isinstance(twin, Version) and twin.value is original.value and original.is_latest is False
    del twin
    assert closed == [], "a copy closed the stored version's bytes"
