"""Hashing benchmark (``python -m bench hashing``, issue #35): the archiver's ratio to the Spark-alone baseline on a
topic with personal fields, with the shipped keyed hash and with the one it replaced, in the same run.

The topic: BENCH_RECORDS (default 2,000,000) records of the archiver benchmark's schema (``bench.archiver.SCHEMA``)
with two more string fields, ``email`` and ``customer_name`` (non-ASCII names among them), in 3 partitions. Each
archiver run archives the whole topic at the catalog's default per-plan limit into a table of its own, in a child
process (``bench.archiver_run``) told its variant by the environment variable ``VARIANT``, which only this module
sets, for its children:

- ``jvm``: both fields declared ``hmac``, hashed by the shipped JVM function (``spark_jobs.keyed_hash``);
- ``literals``: both fields declared ``hmac``, hashed by the pre-#35 expression with the key's padded blocks as
  literals (``bench.keyed_hash_literals``, kept in bench/ only, never shipped);
- ``none``: the control, the same topic with no field declared personal, so nothing hashed.

The baseline does not hash: it stays the fairest Spark-alone pipeline of the archiver benchmark
(``bench.spark_alone``: the same Kafka read, ``from_avro`` of the same schema, the same committer). So each variant's
ratio to it is the archiver's whole overhead on this topic, the hashing included, and the differences between the
variants' ratios are what the hashing costs. Each round runs every variant, each archiver run right before its own
Spark-alone run (a pair, ``bench.common.paired_ratio``); the variants' order rotates from round to round, so that no
variant always runs first. BENCH_PAIRS (default 3) rounds; BENCH_HASH_VARIANTS (default ``jvm,literals,none``) picks
the variants.

Reported per variant: the median of its pairs' ratios (records/s after the Spark start), their spread (the smallest
and largest), the median CPU seconds per million records and the paired CPU ratio; between variants
(``jvm_to_literals``: after the change over before it; ``jvm_to_none`` and ``literals_to_none``: against the
control): the ratios of their rates within each round, their median and spread, and the same for CPU. Each archiver
run reports which keyed hash was in the archiver's place, and the benchmark checks it is the variant's.
"""

from __future__ import annotations

import json
import os
import statistics
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from itertools import combinations
from typing import Any

from bench.archiver import (
    PAIRS,
    RECORDS,
    SCHEMA,
    archive,
    forget_offsets,
    median_run,
    produce,
    spark_alone,
)
from bench.common import (
    between,
    cpu_per_million,
    pair_ratios,
    paired_ratio,
    rate_after_start,
    say,
    spread,
    write_result,
)
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.personal import PiiAction
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.provision import ensure_pseudonym_key

VARIANT = "BENCH_HASHING"
"""The environment variable naming a child's variant: unset, the archiver benchmark's own topic (no personal field)."""
VARIANTS = {
    "jvm": "spark_jobs.keyed_hash.keyed_hash",
    "literals": "bench.keyed_hash_literals.keyed_hash",
    "none": None,
}
"""Each variant and the keyed hash its archiver runs use (None: nothing is hashed)."""
CHOSEN = tuple(os.environ.get("BENCH_HASH_VARIANTS", ",".join(VARIANTS)).split(","))
PERSONAL_FIELDS = {"email": PiiAction.HMAC, "customer_name": PiiAction.HMAC}
PERSONAL_SCHEMA = json.dumps(
    {
        **json.loads(SCHEMA),
        "fields": [
            *json.loads(SCHEMA)["fields"],
            {"name": "email", "type": "string"},
            {"name": "customer_name", "type": "string"},
        ],
    }
)
NAMES = ("Anna Smith", "José Álvarez", "Zoë Müller", "Łukasz Wójcik", "李伟", "Ngozi Okafor", "Søren Ødegård")
CUSTOMERS = 50_000
"""Distinct customers among the records (a customer pays more than once)."""


def personal(index: int) -> dict[str, Any]:
    """The personal fields of record ``index``."""
    customer = index % CUSTOMERS
    return {"email": f"customer-{customer}@example.com", "customer_name": f"{NAMES[customer % len(NAMES)]} {customer}"}


def child_variant() -> str | None:
    """This child's variant (``VARIANT``), None when the archiver benchmark started it."""
    name = os.environ.get(VARIANT)
    if name is not None and name not in VARIANTS:
        raise SystemExit(f"{VARIANT}={name}: not one of {', '.join(VARIANTS)}")
    return name


def topic_schema() -> str:
    """The schema of the topic a child reads: PERSONAL_SCHEMA under any variant, else the archiver benchmark's."""
    return SCHEMA if child_variant() is None else PERSONAL_SCHEMA


def topic_pii() -> dict[str, PiiAction]:
    """The personal fields the child's topic declares: PERSONAL_FIELDS when the variant hashes."""
    name = child_variant()
    return dict(PERSONAL_FIELDS) if name is not None and VARIANTS[name] else {}


@contextmanager
def hash_in_use() -> Iterator[str]:
    """Within the block, the archiver hashes with the variant's keyed hash; yields the qualified name of the one in
    the archiver's place (``spark_jobs.archiver.pseudonyms.keyed_hash``)."""
    from bench.keyed_hash_literals import in_place, installed  # the pre-#35 baseline: in this child process only

    context: AbstractContextManager[None] = installed() if child_variant() == "literals" else nullcontext()
    with context:
        yield in_place()


def rounds(variants: tuple[str, ...], count: int) -> list[tuple[str, ...]]:
    """The variants' order in each of ``count`` rounds: rotated by one each round."""
    return [variants[r % len(variants) :] + variants[: r % len(variants)] for r in range(count)]


def variant_summary(archiver_runs: list[dict[str, Any]], alone_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's pairs (archiver_runs[i] right before alone_runs[i]): their median runs and the pairs' ratios."""
    rates, alone_rates = [rate_after_start(r) for r in archiver_runs], [rate_after_start(r) for r in alone_runs]
    cpu, alone_cpu = [cpu_per_million(r) for r in archiver_runs], [cpu_per_million(r) for r in alone_runs]
    ratios = pair_ratios(rates, alone_rates)
    return {
        "archiver": median_run(archiver_runs),
        "spark_alone": median_run(alone_runs),
        "ratios_to_spark_alone": ratios,
        "ratio_to_spark_alone": paired_ratio(rates, alone_rates),
        "ratio_to_spark_alone_spread": spread(ratios),
        "cpu_seconds_per_million_records": statistics.median(cpu),
        "spark_alone_cpu_seconds_per_million_records": statistics.median(alone_cpu),
        "cpu_ratio_to_spark_alone": paired_ratio(cpu, alone_cpu),
    }


def summary(runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]) -> dict[str, Any]:
    """Every variant's ``variant_summary`` and, for each two of them (in VARIANTS' order), ``between``."""
    measured = [name for name in VARIANTS if name in runs]
    return {
        "variants": {
            name: variant_summary([a for a, _ in runs[name]], [b for _, b in runs[name]]) for name in measured
        },
        **{
            f"{ours}_to_{theirs}": between([a for a, _ in runs[ours]], [a for a, _ in runs[theirs]])
            for ours, theirs in combinations(measured, 2)
        },
    }


def measure(endpoints: Endpoints) -> dict[str, Any]:
    unknown = sorted(set(CHOSEN) - set(VARIANTS))
    if unknown or not CHOSEN:
        raise SystemExit(f"BENCH_HASH_VARIANTS: {', '.join(unknown)} not among {', '.join(VARIANTS)}")
    ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))  # the stack's key, which the archiver runs read
    topic = f"bench.hashing.{uuid.uuid4().hex[:8]}"
    value_bytes = produce(endpoints, topic, RECORDS, schema=PERSONAL_SCHEMA, more=personal)
    per_plan = ArchivePolicy().max_records_per_run
    runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {name: [] for name in CHOSEN}
    order = rounds(CHOSEN, PAIRS)
    for number, variants in enumerate(order, 1):
        for name in variants:
            env = {VARIANT: name}
            forget_offsets(endpoints, topic)
            ours = archive([topic], per_plan, env=env)
            if ours.get("keyed_hash") != VARIANTS[name]:
                raise SystemExit(f"the {name} run hashed with {ours.get('keyed_hash')}, not {VARIANTS[name]}")
            alone = spark_alone(topic, per_plan, env=env)
            runs[name].append((ours, alone))
            ratio = rate_after_start(ours) / rate_after_start(alone)
            say(
                f"hashing round {number}/{len(order)}, {name}: archiver {rate_after_start(ours):,.0f} records/s, "
                f"Spark alone {rate_after_start(alone):,.0f} records/s after the Spark start: {ratio:.2f}"
            )
    return {
        "records": RECORDS,
        "avg_value_bytes": value_bytes,
        "records_per_plan": per_plan,
        "personal_fields": {path: action.value for path, action in PERSONAL_FIELDS.items()},
        "rounds": [list(variants) for variants in order],
        **summary(runs),
    }


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        write_result("hashing", measure(endpoints))
