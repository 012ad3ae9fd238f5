"""The subject index's pure parts (in-process S3): where its objects live, what a lookup makes a batch read, when a
declaration change rebuilds it, and which compaction output it covers from its inputs without reading it."""

from __future__ import annotations

import dataclasses
from datetime import date
from typing import Any

import pytest

from infra.repo import catalog_dir
from kafkalake.layout import (
    PARTITION_PATH_RE,
    DataKey,
    LayoutError,
    Partition,
    parse_data_key,
)
from kafkalake.personal import Keyring, PseudonymKey
from kafkalake.s3_location import notification_filter
from kafkalake.topic_catalog import load_topic_catalog
from spark_jobs.compaction.manifest import Manifest, ManifestStore
from spark_jobs.erasure.index import Hits, _derived, index_digest
from spark_jobs.erasure.subjects import by_schema_version, signature

TOPIC = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
KEY = PseudonymKey("k1", bytes(range(32)))
HOUR = Partition(1, date(2026, 11, 20), 7)
OTHER = Partition(1, date(2026, 11, 20), 8)


def raw(partition: Partition, first: int) -> str:
    return DataKey(TOPIC.prefix, partition, 0, first, first + 9).key()


def output(partition: Partition, run: str) -> str:
    return f"{TOPIC.prefix.compaction_output_prefix(partition, run)}part-00000.parquet"


def test_the_index_lives_beside_the_environments_requests_never_under_a_table_or_the_data_notifications() -> None:
    prefix = TOPIC.prefix.subject_index_prefix()
    assert prefix == f"erasure/{TOPIC.env}/index/{TOPIC.company}/{TOPIC.domain}/{TOPIC.prefix.topic}/"
    assert TOPIC.prefix.subject_index_key() == f"{prefix}index.json"
    segment = f"{TOPIC.prefix.subject_index_segment_prefix('s1')}part-00000.parquet"
    assert segment.startswith(f"{prefix}segments/s1/")
    with pytest.raises(LayoutError, match="'erasure' prefix"):
        parse_data_key(segment)
    [rule] = [r for r in notification_filter()["Key"]["FilterRules"] if r["Name"] == "prefix"]
    assert not segment.startswith(rule["Value"])


def test_a_batch_reads_the_partitions_the_index_names_and_every_object_it_does_not_cover() -> None:
    covered = frozenset({raw(HOUR, 0), raw(OTHER, 0)})
    hits = Hits(frozenset({HOUR.path()}), covered)
    assert hits.wants(raw(HOUR, 0)), "a covered object in a partition the index names"
    assert not hits.wants(raw(OTHER, 0)), "a covered object elsewhere is not read"
    assert hits.wants(raw(OTHER, 10)), "an object written since the refresh is read wherever it lies"
    assert hits.wants(output(HOUR, "r1")) and not Hits(frozenset(), covered | {output(HOUR, "r1")}).wants(
        output(HOUR, "r1")
    )


def test_the_index_keeps_60_bits_of_a_digest() -> None:
    digest = KEY.digest("someone")
    assert index_digest(digest) == int(digest[:15], 16) < 2**60
    assert index_digest(digest) != index_digest(KEY.digest("someone else"))


def test_a_changed_declaration_or_key_changes_the_signature_and_nothing_else_does() -> None:
    base = signature(TOPIC, Keyring(KEY))
    assert signature(dataclasses.replace(TOPIC), Keyring(KEY)) == base
    more = TOPIC.spec.model_copy(update={"subject_fields": (*TOPIC.spec.subject_fields, "id")})
    by_key = TOPIC.spec.model_copy(update={"erasure": "none" if TOPIC.spec.erasure == "by_key" else "by_key"})
    hashed = TOPIC.spec.model_copy(update={"pii": {**TOPIC.spec.pii, "customer_id": "hmac"}})
    changed = [
        signature(dataclasses.replace(TOPIC, spec=more), Keyring(KEY)),
        signature(dataclasses.replace(TOPIC, spec=by_key), Keyring(KEY)),
        signature(dataclasses.replace(TOPIC, spec=hashed), Keyring(KEY)),
        signature(TOPIC, Keyring(PseudonymKey("k2", bytes(range(32))))),
        signature(TOPIC, Keyring(PseudonymKey("k2", bytes(range(32))), (KEY,))),
    ]
    assert len({base, *changed}) == 6


def test_objects_are_grouped_by_schema_version_and_keys_outside_the_layout_left_out() -> None:
    v2 = DataKey(TOPIC.prefix, Partition(2, date(2026, 11, 20), 7), 0, 0, 9).key()
    groups = by_schema_version([raw(OTHER, 0), v2, raw(HOUR, 0), "data/x/readme.parquet"])
    assert groups == [sorted([raw(HOUR, 0), raw(OTHER, 0)]), [v2]]


def manifest(partition: Partition, run: str, inputs: list[str], outputs: list[str]) -> Manifest:
    return Manifest(
        partition.values(),
        run,
        dict.fromkeys(inputs, 1),
        TOPIC.prefix.compaction_output_prefix(partition, run),
        outputs=dict.fromkeys(outputs, 1),
    )


def test_compaction_output_is_covered_unread_only_when_every_input_is(s3: Any) -> None:
    store = ManifestStore(s3, "lake")
    covered = {raw(HOUR, 0), raw(HOUR, 10), raw(OTHER, 0)}
    from_covered = output(HOUR, "r1")
    store.save(TOPIC.prefix.compaction_manifest_key(HOUR), manifest(HOUR, "r1", sorted(covered)[:2], [from_covered]))
    late = raw(OTHER, 10)  # new raw object: this refresh reads it, so output made from it needs no read
    from_new_raw = output(OTHER, "r2")
    store.save(
        TOPIC.prefix.compaction_manifest_key(OTHER), manifest(OTHER, "r2", [raw(OTHER, 0), late], [from_new_raw])
    )
    assert _derived(s3, "lake", TOPIC, {from_covered, from_new_raw, late}, covered) == {from_covered, from_new_raw}
    unknown_input = output(HOUR, "r3")  # compaction of output the index never saw: read
    store.save(TOPIC.prefix.compaction_manifest_key(HOUR), manifest(HOUR, "r3", [output(HOUR, "r0")], [unknown_input]))
    not_listed = output(OTHER, "r4")  # a run's file its manifest does not name (being written): read
    assert _derived(s3, "lake", TOPIC, {unknown_input, not_listed}, covered) == set()
    assert _derived(s3, "lake", TOPIC, {output(Partition(1, date(2026, 11, 21), 0), "r5")}, covered) == set()


def test_one_layout_regex_finds_the_partition_in_raw_keys_and_compaction_output() -> None:
    for name in (raw(HOUR, 0), output(HOUR, "r1")):
        match = PARTITION_PATH_RE.search(name)
        assert match is not None and match.group(1) == HOUR.path()
        assert Partition.from_path(match.group(1)) == HOUR
    assert PARTITION_PATH_RE.search(TOPIC.prefix.compaction_manifest_key(HOUR)) is not None
    assert PARTITION_PATH_RE.search(f"{TOPIC.prefix.data_prefix()}readme.parquet") is None
