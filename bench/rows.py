"""The rows of the performance section of docs/benchmarks.md (``bench.report``), each from the adopted result of its
benchmark."""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.common import pair_ratios, paired_ratio, rate_after_start
from bench.sizing import archiver_sizes
from kafkalake.topic_spec import ArchivePolicy

Results = dict[str, dict[str, Any]]
"""Benchmark name → one result of it (the adopted one, or the newest when adopting)."""


def need(results: Results, name: str) -> dict[str, Any]:
    if name not in results:
        raise KeyError(f"no {name} result in bench/results: run `python -m bench {name}` against the local stack")
    return results[name]


def number(value: float) -> str:
    """Thousands separated; three significant digits below 100 unless whole."""
    if float(value).is_integer() or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.{2 - math.floor(math.log10(abs(value)))}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def archiver_rows(results: Results) -> list[list[str]]:
    b1 = need(results, "archiver")["throughput"]
    run, alone, perf = b1["archiver_default_limit"], b1["spark_alone"], b1["consumer_perf_test"]
    per_plan, records = ArchivePolicy().max_records_per_run, b1["records"]
    what = (
        f"{number(records)} Avro records of ~{b1['avg_value_bytes']:.0f} B in 3 partitions, {number(per_plan)} per plan"
    )
    rates = ", ".join(number(r) for r in run["rates_after_start"])
    alone_rates = ", ".join(number(r) for r in alone["rates_after_start"])
    ten_x, one_x = b1["archiver_10x"], b1["archiver_1x"]
    pairs = pair_ratios(run["rates_after_start"], alone["rates_after_start"])
    return [
        [
            f"B1 archiver, {what}: records/s after the Spark start (median run; runs {rates})",
            number(b1["archiver_records_per_second_after_start"]),
            f"Spark alone, same read, committer and plans, each run right after one of ours ({alone_rates}): "
            f"{number(b1['spark_alone_records_per_second_after_start'])}",
            f"**{paired_ratio(run['rates_after_start'], alone['rates_after_start']):.2f}** (median of "
            f"{len(pairs)} pairs' ratios, {min(pairs):.2f}-{max(pairs):.2f}; goal ≥ 0.9; "
            f"{1 / b1['ratio_cpu_archiver_to_spark_alone']:.2f} by CPU)",
        ],
        [
            "CPU seconds per million records after the Spark start (the job's whole process tree)",
            number(b1["archiver_cpu_seconds_per_million_records"]),
            f"Spark alone: {number(b1['spark_alone_cpu_seconds_per_million_records'])}",
            f"{b1['ratio_cpu_archiver_to_spark_alone']:.2f}",
        ],
        [
            "the physical reference: records/s after the Spark start, archiver (Spark alone)",
            f"{number(b1['archiver_records_per_second_after_start'])} "
            f"({number(b1['spark_alone_records_per_second_after_start'])})",
            f"`kafka-consumer-perf-test`: {number(perf['records_per_second_reported'])}",
            f"{b1['B1_ratio_after_start']:.3f} ({b1['spark_alone_ratio_after_start']:.3f}); end to end "
            f"{b1['B1_ratio_end_to_end']:.3f}; {number(b1['max_records_per_run'])} per plan "
            f"{b1['B1_ratio_after_start_ten_plans']:.3f}, its plans 2-10 {b1['ratio_warm_plans']:.3f}",
        ],
        [
            f"B1m peak RSS of the whole tree, 10x vs 1x backlog, {number(b1['max_records_per_run'])} per plan, "
            f"median of {len(ten_x['peaks_mib'])} runs each",
            f"{number(ten_x['peak_rss_mib'])} MiB",
            f"{number(one_x['peak_rss_mib'])} MiB",
            f"{b1['B1m_ratio_peak_memory_10x_to_1x']:.2f} (20x vs 10x: {b1['ratio_peak_rss_20x_to_10x']:.2f})",
        ],
    ]


def full_fleet_rows(results: Results) -> list[list[str]]:
    f = need(results, "fleet")
    ratios, bounds, share = f["ratios"], f["lower_bounds"], f["share_of_schedule"]
    what = (
        f"the fleet at full size: {f['topics']} topics ({f['heavy_topics']} of {number(f['heavy_records'])} records, "
        f"the others of {number(f['light_records'])}; {number(f['records'])} in all)"
    )
    archiver, maintainer, compactor = f["archiver"], f["maintainer"], f["compactor"]
    return [
        [
            f"{what}: one archiver run, {f['concurrency']} topics at a time ({archiver['objects']} objects)",
            f"{archiver['seconds']:.1f} s ({archiver['session_seconds']:.1f} s of it the Spark start)",
            f"the 15-minute schedule; S3 calls ≥ objects + plans = {bounds['archiver_s3']}",
            f"{share['archiver']:.3f} of the schedule; S3 calls {ratios['archiver_s3']:.2f}",
        ],
        [
            f"one maintainer drain of its {maintainer['counts']['messages']} events "
            f"({f['glue_partitions']} partitions)",
            f"{maintainer['seconds']:.1f} s",
            f"the 10-minute schedule; ⌈messages/10⌉ = {bounds['ReceiveMessage']}, ⌈partitions/100⌉ per table = "
            f"{bounds['BatchCreatePartition']}",
            f"{share['maintainer']:.3f} of the schedule; ReceiveMessage {ratios['ReceiveMessage']:.2f}, "
            f"DeleteMessageBatch {ratios['DeleteMessageBatch']:.2f}, BatchCreatePartition "
            f"{ratios['BatchCreatePartition']:.2f}",
        ],
        [
            f"one compactor run over the closed partitions ({compactor['partitions_compacted']} partitions, "
            f"{compactor['files_before']} files → {compactor['files_after']})",
            f"{compactor['seconds']:.1f} s",
            f"the hourly schedule; Glue calls ≥ a read per table + an update per partition = "
            f"{bounds['compactor_glue']}",
            f"{share['compactor']:.3f} of the schedule; Glue calls {ratios['compactor_glue']:.2f}; the driver's S3 "
            f"calls {f['compactor_driver_s3_calls_per_partition']:.1f} per partition",
        ],
    ]


def maintainer_rows(results: Results) -> list[list[str]]:
    m = need(results, "maintainer")
    calls, bounds, ratios = m["calls"], m["lower_bounds"], m["ratios"]
    return [
        [
            f"maintainer ReceiveMessage / DeleteMessageBatch calls, {number(m['events'])} events",
            f"{calls['sqs.ReceiveMessage']} / {calls['sqs.DeleteMessageBatch']}",
            f"lower bound ⌈N/10⌉ = {bounds['ReceiveMessage']}",
            f"{ratios['ReceiveMessage']:.2f} / {ratios['DeleteMessageBatch']:.2f}",
        ],
        [
            f"maintainer BatchCreatePartition calls ({m['drains']} drains, every partition of a drain confirmed)",
            str(calls["glue.BatchCreatePartition"]),
            "⌈partitions/100⌉ per table per drain",
            f"{ratios['BatchCreatePartition_vs_per_wave_confirm_bound']:.2f} "
            f"({ratios['BatchCreatePartition_vs_per_wave_bound']:.2f} against ⌈new partitions/100⌉)",
        ],
    ]


def erasure_rows(results: Results) -> list[list[str]]:
    """The erasure benchmark's rows, when it has a result (one before the subject index has no find split)."""
    if "erasure" not in results or "erasure_find_seconds" not in results["erasure"]:
        return []
    erased = results["erasure"]
    return [
        [
            f"erasure: {erased['subjects']} subjects' requests over a table of {erased['partitions_total']} partitions "
            f"({erased['rows_removed']} rows removed, {erased['partitions_rewritten']} partitions rewritten, "
            "every replaced object version deleted), wall time",
            f"{erased['erasure_seconds']:.1f} s ({erased['erasure_find_seconds']:.1f} s finding the rows, "
            f"{erased['erasure_after_find_seconds']:.1f} s after)",
            f"the compactor on the same {erased['partitions_rewritten']} partitions: "
            f"{erased['compactor_seconds_same_partitions']:.1f} s",
            f"**{erased['ratio_erasure_to_compactor']:.2f}**",
        ],
        [
            "erasure: finding the requests' rows with the subject index (brought up to date with "
            f"{erased['objects_indexed_by_the_run']} new objects, looked up, the partitions it names read)",
            f"{erased['erasure_find_seconds']:.1f} s",
            f"every file of the table read for the subjects (the job before the index): "
            f"{erased['whole_table_scan_seconds']:.1f} s; building the index once: "
            f"{erased['index_build_seconds']:.1f} s",
            f"**{erased['ratio_find_to_whole_table_scan']:.2f}**",
        ],
    ]


HASH_VARIANTS = {
    "jvm": "hashed by the JVM function (since #35)",
    "literals": "hashed by the pre-#35 expression (key blocks as plan literals)",
    "none": "nothing declared personal (the control)",
}
"""``bench.hashing``'s variants as the rows name them, in their order."""


def uploads_rows(results: Results) -> list[list[str]]:
    """The uploads benchmark's rows, when it has a result: S3's latency added, then moto's own."""
    if "uploads" not in results:
        return []
    u = results["uploads"]
    rows = []
    for case, where in (("s3_latency", "each PUT {:.0f} ms later (S3's small requests)"), ("local", "moto's own")):
        found = u[case]
        low, high = found["ratio_spread"]
        rows.append(
            [
                f"writer, one task's share of the fleet's light pass ({u['members']} plans, {number(u['records'])} "
                f"records, {found['objects']} objects), {where.format(found['added_latency_ms'])}: "
                f"{found['uploads_in_flight']} uploads at a time, seconds (median run)",
                f"{statistics.median(found['seconds']):.2f} s",
                f"one upload at a time (the writer before): {statistics.median(found['baseline_seconds']):.2f} s",
                f"**{found['ratio']:.2f}** (median of {len(found['ratios'])} pairs' ratios, {low:.2f}-{high:.2f})",
            ]
        )
    return rows


def protobuf_rows(results: Results) -> list[list[str]]:
    """The Protobuf benchmark's rows, when it has a result: the archiver against Spark alone with the same decoder,
    then that decoder against ``from_avro`` on the same records."""
    if "archiver-protobuf" not in results:
        return []
    p = results["archiver-protobuf"]["protobuf"]
    low, high = p["ratio_spread"]
    avro = p["ratio_protobuf_to_avro_pairs"]
    what = f"archiver, {number(p['records'])} Protobuf records of ~{p['avg_value_bytes']:.0f} B, one plan"
    runs = ", ".join(number(r) for r in p["archiver"]["rates_after_start"])
    return [
        [
            f"{what}: records/s after the Spark start (median run; runs {runs})",
            number(rate_after_start(p["archiver"])),
            "Spark alone, same read, the same JVM Protobuf decoder and committer, each run right after one of ours: "
            f"{number(rate_after_start(p['spark_alone']))}",
            f"**{p['ratio_archiver_to_spark_alone_after_start']:.2f}** (median of {len(p['ratio_pairs'])} pairs' "
            f"ratios, {low:.2f}-{high:.2f})",
        ],
        [
            "Spark alone on those Protobuf records (the JVM decoder): records/s after the Spark start (median run)",
            number(rate_after_start(p["spark_alone"])),
            f"Spark alone on the same records in Avro (`from_avro`), same rounds: "
            f"{number(rate_after_start(p['spark_alone_avro']))}",
            f"**{p['ratio_protobuf_to_avro_spark_alone']:.2f}** (median of {len(avro)} pairs' ratios, "
            f"{min(avro):.2f}-{max(avro):.2f})",
        ],
    ]


def hashing_rows(results: Results) -> list[list[str]]:
    """The hashing benchmark's rows, when it has a result: each variant against Spark alone, then the variants
    against each other round by round."""
    if "hashing" not in results:
        return []
    h = results["hashing"]
    what = (
        f"archiver, {number(h['records'])} Avro records of ~{h['avg_value_bytes']:.0f} B with "
        f"{len(h['personal_fields'])} personal string fields, {number(h['records_per_plan'])} per plan"
    )
    rows = []
    for name, label in HASH_VARIANTS.items():
        if name not in h["variants"]:
            continue
        v = h["variants"][name]
        low, high = v["ratio_to_spark_alone_spread"]
        rows.append(
            [
                f"{what}, {label}: records/s after the Spark start (median run; runs "
                f"{', '.join(number(r) for r in v['archiver']['rates_after_start'])})",
                number(rate_after_start(v["archiver"])),
                "Spark alone, same read, decode and committer, no hashing, each run right after one of ours: "
                f"{number(rate_after_start(v['spark_alone']))}",
                f"**{v['ratio_to_spark_alone']:.2f}** (median of {len(v['ratios_to_spark_alone'])} pairs' ratios, "
                f"{low:.2f}-{high:.2f}; {1 / v['cpu_ratio_to_spark_alone']:.2f} by CPU)",
            ]
        )
    for ours, theirs in (("jvm", "literals"), ("jvm", "none"), ("literals", "none")):
        if f"{ours}_to_{theirs}" not in h:
            continue
        b = h[f"{ours}_to_{theirs}"]
        low, high = b["rate_ratio_spread"]
        rows.append(
            [
                f"the archiver {HASH_VARIANTS[ours]}, records/s after the Spark start, round by round",
                number(rate_after_start(h["variants"][ours]["archiver"])),
                f"{HASH_VARIANTS[theirs]}, same rounds: {number(rate_after_start(h['variants'][theirs]['archiver']))}",
                f"**{b['rate_ratio']:.2f}** (median of {len(b['rate_ratios'])} rounds' ratios, {low:.2f}-{high:.2f}; "
                f"CPU per record {b['cpu_ratio']:.2f})",
            ]
        )
    return rows


def compactor_rows(results: Results) -> list[list[str]]:
    b3, fleet = need(results, "compactor"), need(results, "compactor-fleet")
    part, plain, s3a = b3["compactor"]["partition"], b3["plain_read_write"], b3["plain_read_write_s3a"]
    before, after = b3["scans_before"], b3["scans_after"]
    return [
        [
            f"B3 compactor, {b3['input_files']} files / {b3['input_bytes'] / 2**20:,.0f} MiB → {part['files_after']} "
            "files, wall time",
            f"{b3['compactor']['wall_seconds']:.1f} s",
            f"plain read + write, the compactor's committer: {plain['seconds']:.1f} s ({plain['files']} files); "
            f"Spark's writer through S3A: {s3a['seconds']:.1f} s",
            f"**{b3['ratio_compactor_to_plain_read_write']:.2f}** ({pairs_spread(b3)}goal ≤ 1.1; "
            f"{b3['ratio_compactor_to_plain_read_write_s3a']:.2f} against S3A)",
        ],
        [
            "full count through Glue, after vs before compaction",
            f"{after['count_seconds']:.2f} s",
            f"{before['count_seconds']:.2f} s",
            f"speed-up {before['count_seconds'] / after['count_seconds']:.1f}x",
        ],
        [
            "filtered count (`note LIKE '%abc%' AND currency = 'EUR'`), after vs before",
            f"{after['filtered_count_seconds']:.2f} s",
            f"{before['filtered_count_seconds']:.2f} s",
            f"speed-up {before['filtered_count_seconds'] / after['filtered_count_seconds']:.1f}x",
        ],
        [
            f"B3-fleet: one compactor run over {fleet['tables']} tables x {fleet['partitions'] // fleet['tables']} "
            f"partitions ({fleet['input_files']} files, {fleet['input_bytes'] / 2**20:,.0f} MiB → "
            f"{fleet['files_after']} files)",
            f"{fleet['compactor_seconds']:.1f} s",
            f"plain read + write, the compactor's committer: {fleet['plain_read_write']['seconds']:.1f} s; "
            f"through S3A: {fleet['plain_read_write_s3a']['seconds']:.1f} s",
            f"**{fleet['ratio_compactor_to_plain_read_write']:.2f}** "
            f"({fleet['ratio_compactor_to_plain_read_write_s3a']:.2f} against S3A)",
        ],
    ]


def pairs_spread(b3: dict[str, Any]) -> str:
    """B3's pairs and their spread, from a result that has them (one of before the pairs has a single run)."""
    if "ratio_compactor_to_plain_read_write_spread" not in b3:
        return ""
    low, high = b3["ratio_compactor_to_plain_read_write_spread"]
    return f"median of {len(b3['ratio_compactor_to_plain_read_write_pairs'])} pairs' ratios, {low:.2f}-{high:.2f}; "


def memory_lines(results: Results) -> list[str]:
    b1 = need(results, "archiver")["throughput"]
    rows = [
        [
            number(m["records_per_plan"]),
            number(m["jvm_mib"]),
            number(m["driver_python_mib"]),
            number(m["workers_python_mib"]),
            number(m["rss_mib"]),
        ]
        for m in b1["memory_per_plan_size"]
    ]
    header = ["records per plan", "Spark JVM (driver + executor) MiB", "Python driver MiB"]
    lines = table(
        [*header, f"Python workers ({need(results, 'archiver')['local_cores']} cores) MiB", "whole tree MiB"], rows
    )
    sizes = archiver_sizes(need(results, "archiver"))
    driver, executor, default = sizes["driver"], sizes["executor"], sizes["emr_default"]
    return [
        *lines,
        "",
        f"EMR Serverless worker sizes derived from these peaks (`bench/sizing.py`): driver {driver['cpu']} vCPU / "
        f"{driver['memory_gb']} GB (needs {number(driver['needed_mib'])} MiB), executor {executor['cpu']} vCPU / "
        f"{executor['memory_gb']} GB (needs {number(executor['needed_mib'])} MiB), against EMR's default "
        f"{default['cpu']} vCPU / {default['memory_gb']} GB for both.",
    ]


def cost_lines(results: Results) -> list[str]:
    bill = need(results, "cost")
    fleet, per_day = bill["fleet"], bill["per_day"]
    header = ["way", "part", "usage per day", "$ per day"]
    rows = []
    for way, spent in per_day.items():
        for line in spent["lines"]:
            usage = ", ".join(f"{name} {number(value)}" for name, value in line["usage"].items())
            rows.append([way, line["part"], usage, f"{line['dollars']:.2f}"])
        rows.append([way, "**total**", "", f"**{spent['total_dollars']:.2f}**"])
    dominant = bill["dominant"]
    levers = "; ".join(f"{name}: x{share:.2f}" for name, share in bill["levers"].items())
    return [
        f"Cost per environment per day (`bench/cost.py`, prices {bill['prices']['as_of']}): {fleet['topics']} topics, "
        f"{fleet['heavy_topics']} of {number(fleet['heavy_records_per_day'])} records a day and "
        f"{fleet['light_topics']} of {number(fleet['light_records_per_day'])}, "
        f"{number(fleet['records_per_day'])} records a day in all; archiving every "
        f"{fleet['archive_every_minutes']} minutes, the maintainer every {fleet['maintain_every_minutes']}, "
        f"compaction every {fleet['compact_every_minutes']}.",
        "",
        *table(header, rows),
        "",
        f"Our bill is dominated by {dominant['part']} ({dominant['share']:.0%}). Our total under each lever: {levers}.",
    ]
