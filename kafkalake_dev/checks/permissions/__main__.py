"""``python -m kafkalake_dev.checks.permissions CALLS.jsonl``: the permission check (``make permissions``; ``make test``
runs it after the stack tests have recorded their calls).

The recorded calls (``kafkalake_dev.local.call_recording``) are mapped to IAM requests and Glue calls
(``mapping``), and with MSK IAM the broker's authorizer decisions to Kafka's IAM requests (``kafka``), then
evaluated against the synthesized template of the deployed environment (``cdk.out``, written by ``make synth``):
IAM (identity policies, the bucket policy, KMS key policies) and Lake Formation (grants and the tags the maintainer
assigns). It fails, naming the principal, the action, the resource and what is missing, on any call that would be
denied, on any call it cannot map, when a pipeline principal made no call at all (or, with MSK IAM, the archiver no
Kafka request), and when the self-test finds a statement whose removal changes nothing it should. A report is
written beside the calls.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from infra.repo import REPO_ROOT, catalog_dir, environments_file
from kafkalake.environments import EnvironmentConfig, load_environments
from kafkalake.permissions import TableTags, access_model
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.checks.permissions.iam import evaluate_iam
from kafkalake_dev.checks.permissions.kafka import KafkaNames, authorizer_lines, kafka_requests
from kafkalake_dev.checks.permissions.lake_formation import evaluate_lake_formation
from kafkalake_dev.checks.permissions.mapping import LocalNames, Unmapped, iam_and_lake_formation
from kafkalake_dev.checks.permissions.necessity import check_necessity
from kafkalake_dev.checks.permissions.requests import DEPLOYED, PRINCIPALS, GlueCall, IamRequest
from kafkalake_dev.checks.permissions.templates import load_template, resolve_policies
from kafkalake_dev.local.call_recording import KEYS_SUFFIX
from kafkalake_dev.local.stack import authorizer_log


def read_calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise SystemExit(f"permission check: no recorded calls at {path}: run the stack tests first (make test)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def local_names(path: Path, environment: EnvironmentConfig, tables: Iterable[TableTags]) -> LocalNames:
    keys = Path(f"{path}{KEYS_SUFFIX}")
    restricted = json.loads(keys.read_text()).get("restricted", []) if keys.exists() else []
    return LocalNames(frozenset(restricted), environment.queue_name, {t.table: t.database for t in tables})


def kafka_mapped(environment: EnvironmentConfig, log: Path) -> list[Any]:
    """With MSK IAM (``msk_cluster_arn``), the broker's authorizer decisions in ``log`` as IAM requests of the
    deployed cluster, and what could not be mapped (``kafka``); nothing otherwise."""
    if not environment.msk_cluster_arn:
        return []
    names = KafkaNames.of(load_topic_catalog(catalog_dir()).for_env(environment.name))
    return list(kafka_requests(authorizer_lines(log), environment.msk_cluster_arn, names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalake_dev.checks.permissions", description=__doc__)
    parser.add_argument("calls", type=Path, help="the recorded calls (make test: build/permission-check/calls.jsonl)")
    parser.add_argument("--cdk-out", type=Path, default=REPO_ROOT / "cdk.out", help="where make synth wrote")
    parser.add_argument(
        "--kafka-log",
        type=Path,
        default=None,
        help="the broker's authorizer decisions of the stack tests (default: the local stack's, which make test "
        "empties first)",
    )
    args = parser.parse_args(argv)
    env = DEPLOYED.env
    environment = load_environments(environments_file())[env]
    tables = access_model(environment, load_topic_catalog(catalog_dir()).for_env(env)).tables
    records = read_calls(args.calls)
    mapped = list(iam_and_lake_formation(records, local_names(args.calls, environment, tables)))
    found = kafka_mapped(environment, args.kafka_log or authorizer_log())
    kafka = sum(isinstance(r, IamRequest) for r in found)
    mapped += found
    requests = list({r.key(): r for r in mapped if isinstance(r, IamRequest)}.values())
    glue_calls = list(dict.fromkeys(c for c in mapped if isinstance(c, GlueCall)))
    problems = sorted({m.message() for m in mapped if isinstance(m, Unmapped)})
    seen = Counter(r["principal"] for r in records)
    problems += [f"{p}: no call recorded (the stack tests never ran its code?)" for p in PRINCIPALS if not seen[p]]
    if environment.msk_cluster_arn and not kafka:
        problems.append(
            "archiver: no Kafka request through the broker's IAM listener (tests/integration/test_msk_iam.py)"
        )

    template = load_template(env, args.cdk_out)
    policies = resolve_policies(template, environment, DEPLOYED)
    problems += [str(f) for f in evaluate_iam(requests, policies)]
    problems += [str(f) for f in evaluate_lake_formation(glue_calls, template, tables)]
    necessity = check_necessity(requests, policies)
    problems += [f"self-test: {line}" for line in necessity.insensitive]
    documents = {name: doc for role in policies.roles.values() for name, doc in role.identity.items()}
    for ref in necessity.unused:
        statement = documents[ref.policy]["Statement"][ref.index]
        print(f"  no recorded call used {ref.describe(documents[ref.policy])}: {json.dumps(statement)[:160]}")
    for ref, parts in necessity.unused_parts.items():
        print(f"  no recorded call used, of {ref.describe(documents[ref.policy])}: {', '.join(parts)}")

    summary = ", ".join(f"{p} {seen[p]}" for p in PRINCIPALS)
    print(
        f"permission check: {len(records)} recorded calls ({summary}) and {kafka} Kafka requests → "
        f"{len(requests)} distinct IAM requests, "
        f"{len(glue_calls)} distinct Glue calls, evaluated against {args.cdk_out}/kafkalake-{env}.template.json; "
        f"self-test: {len(necessity.needed)} statements each needed by a recorded call (removing one denies it)"
    )
    report = args.calls.with_name("report.json")
    report.write_text(json.dumps({"calls": len(records), "per_principal": dict(seen), "problems": problems}, indent=2))
    for problem in problems:
        print(f"  DENIED or unchecked: {problem}", file=sys.stderr)
    print(
        f"permission check: {'FAILED, ' + str(len(problems)) + ' problems' if problems else 'passed'} "
        f"(report: {report})"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
