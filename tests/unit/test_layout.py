import fnmatch
from datetime import date
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalake.layout import (
    COMPACTED_DIR,
    COMPLETENESS_CLAIMS,
    LATE_DATA_MARKERS,
    DataKey,
    LayoutError,
    Partition,
    TablePrefix,
    is_compaction_output,
    parse_data_key,
    plan_id,
    to_segment,
)
from kafkalake.s3_location import decode_event_key

segments = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,20}", fullmatch=True)
keys = st.builds(
    DataKey,
    table=st.builds(TablePrefix, segments, segments, segments, segments),
    partition=st.builds(
        Partition,
        schema_version=st.integers(1, 999_999),
        dt=st.dates(date(2000, 1, 1), date(2999, 12, 31)),
        hour=st.integers(0, 23),
    ),
    kafka_partition=st.integers(0, 99_999),
    first_offset=st.integers(0, 10**15),
    last_offset=st.just(10**15 + 7),
)


def s3_event_encode(key: str) -> str:
    """What moto puts in an event: everything escaped, '/' included ('+' becomes %2B)."""
    return quote(key, safe="")


def real_s3_event_encode(key: str) -> str:
    """What real S3 puts in an event: '/' kept, ' ' as '+', '+' as %2B."""
    return quote(key, safe="/").replace("%20", "+")


@given(keys)
def test_round_trip_through_event_encodings(data_key: DataKey) -> None:
    key = data_key.key()
    assert parse_data_key(key) == data_key and not is_compaction_output(key)
    assert parse_data_key(decode_event_key(s3_event_encode(key))) == data_key
    assert parse_data_key(decode_event_key(real_s3_event_encode(key))) == data_key


@given(keys)
def test_formatted_key_shape(data_key: DataKey) -> None:
    key = data_key.key()
    assert key.startswith(f"data/{data_key.table.env}/{data_key.table.company}/")
    assert f"/schema_version={data_key.partition.schema_version}/dt=" in key
    assert key.endswith(".parquet")


def test_example_key() -> None:
    key = DataKey(
        TablePrefix("staging", "acme", "payments", "card-authorized"),
        Partition(2, date(2026, 11, 21), 7),
        kafka_partition=1,
        first_offset=100,
        last_offset=199,
    ).key()
    assert key == (
        "data/staging/acme/payments/card-authorized/schema_version=2/dt=2026-11-21/hour=07/"
        "card-authorized+1+100-199.parquet"
    )
    assert (
        decode_event_key(
            "data%2Fstaging%2Facme%2Fpayments%2Fcard-authorized%2Fschema_version%3D2%2Fdt%3D2026-11-21"
            "%2Fhour%3D07%2Fcard-authorized%2B1%2B100-199.parquet"
        )
        == key
    )


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("quarantine/staging/acme/payments/card-authorized/x.parquet", "under the 'quarantine' prefix"),
        ("restricted/quarantine/staging/acme/p/t/dt=2026-01-01/t+0+0-1.parquet", "under the 'restricted' prefix"),
        ("compacted/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/a.parquet", "compaction output"),
        ("data/staging/acme/p/t/_compacted/schema_version=1/dt=2026-01-01/hour=00/run-0a/p.parquet", "compaction"),
        ("state/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/t+0+0-1.parquet", "'state' prefix"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/_SUCCESS", "not a .parquet data object"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/t+0+0-1.parquet.tmp", "not a .parquet"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=24/t+0+0-1.parquet", "hour=24 is outside"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-02-30/hour=00/t+0+0-1.parquet", "invalid partition"),
        ("data/staging/acme/p/t/schema_version=0/dt=2026-01-01/hour=00/t+0+0-1.parquet", "does not match"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/u+0+0-1.parquet", "differs from prefix"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/t+0+9-1.parquet", "is reversed"),
        ("data/staging/acme/p/t/schema_version=1/dt=2026-01-01/t+0+0-1.parquet", "does not match"),
        ("data/Staging/acme/p/t/schema_version=1/dt=2026-01-01/hour=00/t+0+0-1.parquet", "does not match"),
    ],
)
def test_foreign_keys_are_rejected_with_a_reason(key: str, reason: str) -> None:
    with pytest.raises(LayoutError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_data_key(key)


def test_prefixes_do_not_overlap() -> None:
    prefix = TablePrefix("production", "acme", "payments", "card-authorized")
    roots = {
        p.split("/")[0]
        for p in (
            prefix.data_prefix(),
            prefix.quarantine_prefix(),
            prefix.legacy_compacted_prefix(),
            prefix.state_prefix(),
        )
    }
    assert roots == {"data", "quarantine", "compacted", "state"}


def test_compaction_output_lies_under_the_table_location_hidden_beside_the_partitions() -> None:
    """Under the table's location (SDK for pandas, Lake Formation), in a folder readers skip when they list the table
    or a partition (a leading ``_``), never inside a raw partition directory, with no ``=`` but the partition's."""
    prefix = TablePrefix("staging", "acme", "payments", "card-authorized")
    partition = Partition(2, date(2026, 11, 20), 7)
    output = prefix.compaction_output_prefix(partition, "0123abcd")
    assert output.startswith(prefix.data_prefix()) and output.startswith(prefix.compacted_prefix())
    relative = output[len(prefix.data_prefix()) :]
    assert relative.split("/")[0] == COMPACTED_DIR and COMPACTED_DIR.startswith("_")
    assert not output.startswith(prefix.data_prefix() + partition.path())
    assert [s for s in relative.split("/") if "=" in s] == partition.path().strip("/").split("/")
    assert is_compaction_output(output) and is_compaction_output(output + "part-00000.parquet")
    assert is_compaction_output(prefix.legacy_compacted_prefix() + partition.path() + "run=0a/part-00000.parquet")
    assert not is_compaction_output(prefix.data_prefix() + partition.path() + "card-authorized+0+0-9.parquet")
    assert not is_compaction_output(prefix.quarantine_prefix())


def test_partition_values_round_trip() -> None:
    partition = Partition(3, date(2026, 1, 2), 5)
    assert partition.values() == ["3", "2026-01-02", "05"]
    assert Partition.from_values(partition.values()) == partition


def test_to_segment() -> None:
    assert to_segment("Card.Authorized") == "card-authorized"
    with pytest.raises(LayoutError, match="no usable path segment"):
        to_segment("...")


def test_late_data_markers_are_under_the_state_prefix_and_the_iam_pattern() -> None:
    prefix = TablePrefix("staging", "acme", "payments", "card-authorized")
    marker = prefix.late_data_key(Partition(2, date(2026, 11, 20), 7))
    assert marker == "state/staging/acme/payments/card-authorized/late/schema_version=2/dt=2026-11-20/hour=07/late.json"
    assert marker.startswith(prefix.late_data_prefix()) and fnmatch.fnmatchcase(marker, LATE_DATA_MARKERS)
    with pytest.raises(LayoutError, match="state"):
        parse_data_key(marker)


def test_completeness_claims_are_beside_the_late_data_markers_and_under_their_iam_pattern() -> None:
    prefix = TablePrefix("staging", "acme", "payments", "card-authorized")
    claim = prefix.completeness_claim_key(Partition(2, date(2026, 11, 20), 7))
    assert claim == (
        "state/staging/acme/payments/card-authorized/complete/schema_version=2/dt=2026-11-20/hour=07/event.json"
    )
    assert fnmatch.fnmatchcase(claim, COMPLETENESS_CLAIMS) and not fnmatch.fnmatchcase(claim, LATE_DATA_MARKERS)
    with pytest.raises(LayoutError, match="state"):
        parse_data_key(claim)


def test_durable_records_live_side_by_side_under_the_state_prefix_with_their_existing_keys() -> None:
    """Receipts and compaction manifests: keys unchanged since they were first written (lakes and audits rely on
    them), both decided here."""
    prefix = TablePrefix("staging", "acme", "payments", "card-authorized")
    partition = Partition(2, date(2026, 11, 20), 7)
    plan = plan_id("2026-11-21T07:30:00.123456+00:00", {1: (5, 9), 0: (0, 10)})
    assert plan == plan_id("2026-11-21T07:30:00.123456+00:00", {0: (0, 10), 1: (5, 9)}), "the ranges' order"
    receipt = prefix.receipt_key(plan)
    assert receipt == "state/staging/acme/payments/card-authorized/receipts/20261121T073000123456Z-ddf9b434.json"
    assert prefix.plan_of_receipt(receipt) == plan
    manifest = prefix.compaction_manifest_key(partition)
    assert manifest == (
        "state/staging/acme/payments/card-authorized/compaction/schema_version=2/dt=2026-11-20/hour=07/manifest.json"
    )
    assert receipt.startswith(prefix.receipts_prefix()) and manifest.startswith(prefix.compaction_prefix())
    assert prefix.compaction_output_prefix(partition, "0123abcd") == (
        "data/staging/acme/payments/card-authorized/_compacted/schema_version=2/dt=2026-11-20/hour=07/run-0123abcd/"
    )
