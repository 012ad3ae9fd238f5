"""The inventory as one self-contained page (inline CSS and SVG, no scripts or downloads): the table of
``kafkalake_dev.checks.inventory.rows`` and a chart of files per partition before and after compaction.

The table fits its window: long cells wrap at 1,400 px; below 900 px each table becomes a card of label: value
lines (every cell carries its column's name in ``data-label``), and the charts scale down to the width.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from kafkalake_dev.checks.inventory import COLUMNS, TableInventory, rows

BAR_WIDTH, GAP, CHART_HEIGHT = 9, 8, 120


def chart_svg(item: TableInventory) -> str:
    """Files per partition: before compaction (grey) next to what readers open now (blue)."""
    tallest = max([1, *(max(p.files_before, p.files) for p in item.partitions)])
    step = 2 * BAR_WIDTH + GAP
    width = max(200, 40 + step * len(item.partitions))
    bars = []
    for index, part in enumerate(item.partitions):
        x = 36 + index * step
        for offset, count, kind in ((0, part.files_before, "before"), (BAR_WIDTH, part.files, "now")):
            height = max(1.0, CHART_HEIGHT * count / tallest)
            bars.append(
                f'<rect class="bar {kind}" x="{x + offset}" y="{10 + CHART_HEIGHT - height:.1f}" '
                f'width="{BAR_WIDTH - 1}" height="{height:.1f}" data-partition="{html.escape(part.label)}" '
                f'data-files="{count}"><title>{html.escape(part.label)}: {count} files {kind}</title></rect>'
            )
    axis = (
        f'<line x1="34" y1="{10 + CHART_HEIGHT}" x2="{width}" y2="{10 + CHART_HEIGHT}" stroke="#999"/>'
        f'<text x="30" y="16" text-anchor="end">{tallest}</text>'
        f'<text x="30" y="{10 + CHART_HEIGHT}" text-anchor="end">0</text>'
    )
    label = f"files per partition of {item.database}.{item.table}"
    return (
        f'<svg class="chart" role="img" aria-label="{html.escape(label)}" width="{width}" '
        f'height="{CHART_HEIGHT + 30}" viewBox="0 0 {width} {CHART_HEIGHT + 30}">{axis}{"".join(bars)}</svg>'
    )


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin-bottom: 2rem; width: 100%; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
td, h1, h2, h3, li { overflow-wrap: anywhere; }
th { background: #f3f3f3; }
svg.chart { max-width: 100%; height: auto; }
@media (max-width: 900px) {
  body { margin: 0.8rem; }
  #inventory thead { display: none; }
  #inventory, #inventory tbody, #inventory tr, #inventory td { display: block; width: auto; }
  #inventory tr { border: 1px solid #ccc; margin-bottom: 1rem; }
  #inventory td { border: none; border-bottom: 1px solid #eee; }
  #inventory td::before { content: attr(data-label); display: block; font-weight: 600; color: #555; }
}
.bar.before { fill: #b0b0b0; } .bar.now { fill: #2b6cb0; }
.chart text { font-size: 10px; fill: #555; }
.legend span { display: inline-block; width: 0.8rem; height: 0.8rem; margin: 0 0.3rem 0 1rem; }
"""


def render_html(inventory: list[TableInventory], title: str, drift: Sequence[str] = ()) -> str:
    """The page; ``drift`` lines (``Drift.lines``) are listed under the table."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join(
        '<tr class="table-row">'
        + "".join(
            f'<td data-label="{html.escape(column)}">{html.escape(cell)}</td>'
            for column, cell in zip(COLUMNS, row, strict=True)
        )
        + "</tr>"
        for row in rows(inventory)
    )
    charts = "".join(
        f'<section class="table-chart"><h3>{html.escape(item.database)}.{html.escape(item.table)}</h3>'
        f"{chart_svg(item)}</section>"
        for item in inventory
    )
    legend = (
        '<p class="legend">files per partition:<span style="background:#b0b0b0"></span>before compaction'
        '<span style="background:#2b6cb0"></span>now (what readers open)</p>'
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f'<table id="inventory"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f"{_drift_section(drift)}"
        f"<h2>Files per partition</h2>{legend}{charts}</body></html>\n"
    )


def _drift_section(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<h2>Catalog drift</h2><ul id="drift">{items}</ul>'
