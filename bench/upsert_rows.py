"""``bench.upsert``'s rows in docs/benchmarks.md's table: an upsert plan against appending the same records, at each
table size, how it grows, the bytes it rewrites, and the extra variant."""

from __future__ import annotations

import statistics
from typing import Any

from bench.rows import Results, number


def upsert_rows(results: Results) -> list[list[str]]:
    """The upsert benchmark's rows, when it has a result."""
    if "upsert" not in results:
        return []
    u = results["upsert"]
    rows: list[list[str]] = []
    for size in u["sizes"]:
        rows += size_rows(u, size)
    if u.get("growth"):
        first, last = u["sizes"][0], u["sizes"][-1]
        g = u["growth"]
        rows.append(
            [
                f"the upsert's wall seconds at {number(last['keys'])} keys against {number(first['keys'])} "
                f"({g['keys']:.0f}x keys, the same plan and {last['upsert_table_data_files']} files)",
                f"{number(last['upsert_wall_seconds'])} s",
                f"{number(first['upsert_wall_seconds'])} s (append: {number(last['append_wall_seconds'])} s against "
                f"{number(first['append_wall_seconds'])} s)",
                f"**{g['upsert_wall_seconds']:.2f}x** (CPU {g['upsert_cpu_seconds']:.2f}x; append "
                f"{g['append_wall_seconds']:.2f}x"
                + (
                    f"; the extra variant {g['bound_once_wall_seconds']:.2f}x)"
                    if "bound_once_wall_seconds" in g
                    else ")"
                ),
            ]
        )
    return rows


def size_rows(u: dict[str, Any], s: dict[str, Any]) -> list[list[str]]:
    """One table size's rows: wall and CPU against the append, the bytes, the extra variant."""
    plan, pairs = s["plan"], len(s["upsert_runs"])
    what = (
        f"upsert table: one plan of {number(u['changes'])} changes ({number(plan['updates'])} updates, "
        f"{number(plan['inserts'])} inserts, {number(plan['deletes'])} tombstones; {s['plan_files']} change objects, "
        f"{s['plan_bytes'] / 1e6:.0f} MB) by `upsert_plan` (copy-on-write, pyiceberg {u['pyiceberg']}) into a table of "
        f"{number(s['keys'])} keys ({s['upsert_table_data_files']} hourly files, "
        f"{s['upsert_table_bytes'] / 1e6:.0f} MB)"
    )
    ups, apps = s["upsert_runs"], s["append_runs"]
    rows = [
        [
            f"{what}: wall seconds (median run; runs {', '.join(number(r['wall_seconds']) for r in ups)}; "
            f"{s['delete_share_of_upsert_wall']:.0%} of it in `Transaction.delete`)",
            f"{number(s['upsert_wall_seconds'])} s",
            f"`append_plan` of the same objects into an append table of the same rows "
            f"({s['append_table_data_files']} files), each run right after one of ours: "
            f"{number(s['append_wall_seconds'])} s",
            ratio(s["upsert_to_append_wall"], pairs),
        ],
        [
            "the same: CPU seconds of the process (every thread)",
            f"{number(s['upsert_cpu_seconds'])} s",
            f"append: {number(s['append_cpu_seconds'])} s",
            ratio(s["upsert_to_append_cpu"], pairs),
        ],
        [
            "the same: bytes the commit wrote and removed (its snapshots' added- and removed-files-size)",
            f"{median_of(ups, 'added_bytes') / 1e6:.0f} MB written, {median_of(ups, 'removed_bytes') / 1e6:.0f} MB "
            f"removed ({median_of(ups, 'removed_files'):.0f} of {s['upsert_table_data_files']} files rewritten)",
            f"append: no data written ({median_of(apps, 'added_bytes') / 1e6:.0f} MB of change objects added by "
            "reference)",
            f"{median_of(ups, 'added_bytes') / s['upsert_table_bytes']:.2f} of the table written per plan",
        ],
    ]
    if "bound_once_runs" in s:
        rows.append(
            [
                "extra, not shipped: the same upsert with each `In` bound once (pyiceberg binds it again for every "
                "data file while planning the rewrite): wall seconds",
                f"{number(s['bound_once_wall_seconds'])} s",
                f"the upsert as shipped, same pairs: {number(s['upsert_wall_seconds'])} s; append "
                f"{number(s['append_wall_seconds'])} s",
                f"{ratio(s['bound_once_to_upsert_wall'], pairs)}; "
                f"{s['bound_once_to_append_wall']['median']:.0f}x the append",
            ]
        )
    return rows


def ratio(found: dict[str, Any], pairs: int) -> str:
    low, high = found["spread"]
    if pairs == 1:
        return f"**{number(found['median'])}** (one pair)"
    return f"**{number(found['median'])}** (median of {pairs} pairs' ratios, {number(low)}-{number(high)})"


def median_of(runs: list[dict[str, Any]], name: str) -> float:
    return float(statistics.median(float(r[name]) for r in runs))
