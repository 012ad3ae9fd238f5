"""Open a page in headless Chromium (Debian's, driven by Playwright) and report what actually rendered."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def rendered(page_file: Path, screenshot: Path | None = None, width: int = 1600) -> dict[str, Any]:
    """Visible table rows (cell texts) and chart bars (size on screen, data attributes) of the inventory page in a
    window ``width`` pixels wide; how far the page overflows it sideways (``overflow``, 0 when it fits) and the
    label each cell of the first row shows before its text (``labels``, CSS ``::before``; "none" when hidden)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.goto(page_file.resolve().as_uri())
            rows = [
                [cell.inner_text() for cell in row.locator("td").all()]
                for row in page.locator("#inventory tbody tr").all()
                if row.is_visible()
            ]
            headers = [h.inner_text() for h in page.locator("#inventory thead th").all()]
            charts = []
            for chart in page.locator("svg.chart").all():
                bars = []
                for bar in chart.locator("rect.bar").all():
                    box = bar.bounding_box()
                    bars.append(
                        {
                            "kind": "before" if "before" in (bar.get_attribute("class") or "") else "now",
                            "files": int(bar.get_attribute("data-files") or -1),
                            "partition": bar.get_attribute("data-partition"),
                            "height": box["height"] if box else 0.0,
                            "width": box["width"] if box else 0.0,
                            "fill": bar.evaluate("e => getComputedStyle(e).fill"),
                        }
                    )
                charts.append({"label": chart.get_attribute("aria-label"), "visible": chart.is_visible(), "bars": bars})
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            labels = page.locator("#inventory tbody tr").first.evaluate(
                "row => [...row.cells].map(c => getComputedStyle(c, '::before').content)"
            )
            return {
                "headers": headers,
                "rows": rows,
                "charts": charts,
                "console_errors": errors,
                "overflow": overflow,
                "labels": labels,
            }
        finally:
            browser.close()
