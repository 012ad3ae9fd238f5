"""The inventory page, rendered by headless Chromium: the table and the files-per-partition chart."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from kafkalake_dev.checks.inventory import COLUMNS, PartitionFiles, TableInventory, rows
from kafkalake_dev.checks.inventory_page import render_html
from tests.browser import rendered

TAKEN = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def partition(version: int, hour: int, before: int, now: int, *, compacted: bool) -> PartitionFiles:
    return PartitionFiles(
        values=(str(version), "2026-11-20", f"{hour:02d}"),
        location="s3://lake/compacted/x/" if compacted else "s3://lake/data/x/",
        complete=compacted,
        compacted=compacted,
        files_before=before,
        files=now,
        bytes=1000 * now,
    )


INVENTORY = [
    TableInventory(
        "acme_payments",
        "card_authorized",
        "staging.acme.payments.card-authorized",
        {1: ["id", "amount_cents", "_kafka_offset"], 2: ["merchant_country"]},
        [
            partition(1, 7, 12, 1, compacted=True),
            partition(1, 8, 9, 1, compacted=True),
            partition(2, 9, 4, 4, compacted=False),
        ],
        quarantined_rows=3,
        owner="payments-platform",
        newest_kafka_time=datetime(2026, 11, 20, 9, 48, tzinfo=UTC),
        drift="in sync",
        taken_at=TAKEN,
    ),
    TableInventory(
        "globex_iot", "sensor_readings", "staging.globex.iot.sensor-readings", {1: ["device_id"]}, [], 0, taken_at=TAKEN
    ),
]
DRIFT = ["uncatalogued: staging.acme.sales.orders (would be acme/sales/staging/orders)"]


def test_table_and_chart_render_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "inventory.html"
    page.write_text(render_html(INVENTORY, "kafkalake inventory: staging", DRIFT))
    seen = rendered(page, screenshot=tmp_path / "inventory.png")
    assert seen["console_errors"] == []
    assert seen["headers"] == list(COLUMNS)
    assert seen["rows"] == rows(INVENTORY)
    card = seen["rows"][0]
    assert card[:3] == ["acme_payments", "card_authorized", "staging.acme.payments.card-authorized"]
    assert card[3] == "1, 2" and "v2: +merchant_country" in card[4]
    assert card[5:10] == ["3 (2 compacted)", "2026-11-20 08:00", "25 → 6", "6,000", "3"]
    assert card[10:] == ["payments-platform", "12 min (Kafka time 2026-11-20 09:48 UTC)", "in sync", "hive"]
    assert seen["rows"][1][10:] == ["-", "-", "-", "hive"]
    card_chart, empty_chart = seen["charts"]
    assert card_chart["visible"] and card_chart["label"] == "files per partition of acme_payments.card_authorized"
    bars = card_chart["bars"]
    assert [(b["partition"], b["kind"], b["files"]) for b in bars] == [
        ("v1 2026-11-20 07h", "before", 12),
        ("v1 2026-11-20 07h", "now", 1),
        ("v1 2026-11-20 08h", "before", 9),
        ("v1 2026-11-20 08h", "now", 1),
        ("v2 2026-11-20 09h", "before", 4),
        ("v2 2026-11-20 09h", "now", 4),
    ]
    assert all(b["width"] > 0 for b in bars)
    tallest = bars[0]["height"]
    for bar in bars:  # drawn to scale: height on screen proportional to the file count
        assert abs(bar["height"] - tallest * bar["files"] / 12) < 1.5
    assert {b["fill"] for b in bars if b["kind"] == "before"} != {b["fill"] for b in bars if b["kind"] == "now"}
    assert empty_chart["visible"] and empty_chart["bars"] == []
    assert (tmp_path / "inventory.png").stat().st_size > 10_000


@pytest.mark.parametrize("width", [1400, 390])
def test_the_table_fits_a_laptop_and_a_phone(tmp_path: Path, width: int) -> None:
    """No sideways scrolling at 1,400 px (long cells wrap) nor on a phone, where each row becomes a card whose
    cells show their column's name."""
    many = [
        TableInventory(
            "acme_payments",
            f"card_authorized_with_a_rather_long_table_name_{i}",
            f"staging.acme.payments.card-authorized-with-a-rather-long-kafka-topic-name-{i}",
            {1: [f"column_{c}" for c in range(30)], 2: ["merchant_country", "merchant_category_code"]},
            [partition(1, h, 12, 1, compacted=True) for h in range(24)],
            quarantined_rows=3,
            owner="payments-platform",
            newest_kafka_time=datetime(2026, 11, 20, 9, 48, tzinfo=UTC),
            drift="registry has v3, the catalog lacks it",
            taken_at=TAKEN,
        )
        for i in range(3)
    ]
    page = tmp_path / "inventory.html"
    page.write_text(render_html(many, "kafkalake inventory: staging", DRIFT))
    seen = rendered(page, screenshot=tmp_path / f"inventory-{width}.png", width=width)
    assert seen["console_errors"] == []
    assert seen["overflow"] == 0
    assert seen["rows"] == rows(many)
    if width < 900:
        assert seen["labels"] == [f'"{column}"' for column in COLUMNS]
    else:
        assert seen["labels"] == ["none"] * len(COLUMNS)
        assert seen["headers"] == list(COLUMNS)
