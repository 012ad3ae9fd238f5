"""The permission check's self-test: a check that allows everything proves nothing, so each statement that allowed
a recorded request is removed in turn and the requests it allowed are evaluated again; at least one must be refused.
It also reports, without failing, the statements no recorded request used (candidates for removal, or permissions
for code paths the tests do not reach), the actions and resources of a used statement that no request it allowed
named (the same, one level finer), and the statements whose requests another statement allows as well."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache

from kafkalake_dev.checks.permissions.iam import Decision, StatementRef, decide, run_simulator, simulation, statements
from kafkalake_dev.checks.permissions.requests import IamRequest
from kafkalake_dev.checks.permissions.templates import Document, Policies


@dataclass(frozen=True)
class Necessity:
    needed: dict[StatementRef, IamRequest] = field(default_factory=dict)
    """Each statement whose removal refuses a recorded request, with one such request."""
    shared: dict[StatementRef, list[IamRequest]] = field(default_factory=dict)
    """Statements whose requests stay allowed without them (another statement allows them too)."""
    unused: list[StatementRef] = field(default_factory=list)
    """Identity statements of the recorded principals that allowed no recorded request."""
    unused_parts: dict[StatementRef, list[str]] = field(default_factory=dict)
    """Of each identity statement that allowed a recorded request: its actions and resources none of them named."""
    insensitive: list[str] = field(default_factory=list)
    """Failures of the self-test: a request that only one statement allowed and that is still allowed without it."""


def check_necessity(requests: Iterable[IamRequest], policies: Policies) -> Necessity:
    """Remove each statement that allowed a request and evaluate those requests again (one simulator batch)."""
    allowed = [d for d in decide(requests, policies) if d.outcome == "Allowed"]
    granted: dict[StatementRef, list[Decision]] = defaultdict(list)
    for d in allowed:
        for ref in d.grants:
            granted[ref].append(d)
    batch = [(ref, d) for ref, decisions in granted.items() for d in decisions]
    answers = run_simulator([simulation(d.request, without(policies, ref)) for ref, d in batch])
    still: dict[StatementRef, list[Decision]] = defaultdict(list)
    refused: dict[StatementRef, IamRequest] = {}
    for (ref, d), answer in zip(batch, answers, strict=True):
        if answer["result"] == "Allowed":
            still[ref].append(d)
        else:
            refused.setdefault(ref, d.request)
    principals = {d.request.principal for d in allowed}
    identity = {name: doc for role in policies.roles.values() for name, doc in role.identity.items()}
    parts = {
        ref: found
        for ref, decisions in granted.items()
        if not ref.resource_policy and ref.policy in identity
        for found in [unused_in(statements(identity[ref.policy])[ref.index], [d.request for d in decisions])]
        if found
    }
    return Necessity(
        unused_parts=parts,
        needed=refused,
        shared={ref: [d.request for d in ds] for ref, ds in still.items() if ref not in refused},
        unused=[
            ref
            for principal in sorted(principals)
            for name, document in policies.roles[principal].identity.items()
            for ref in (StatementRef(name, i) for i in range(len(statements(document))))
            if ref not in granted
        ],
        insensitive=[
            f"{d.request.principal}: {d.request.action} on {d.request.resource} is still allowed without "
            f"{ref.describe()}, its only grant"
            for ref, ds in still.items()
            for d in ds
            if d.grants == (ref,)
        ],
    )


def without(policies: Policies, ref: StatementRef) -> Policies:
    """``policies`` with one statement removed."""
    if ref.resource_policy:
        return policies.with_resource_policy(ref.policy, drop(policies.resource_policies[ref.policy], ref.index))
    for role in policies.roles.values():
        if ref.policy in role.identity:
            return policies.with_role(
                replace(role, identity={**role.identity, ref.policy: drop(role.identity[ref.policy], ref.index)})
            )
    raise KeyError(f"no policy {ref.policy}")


def drop(document: Document, index: int) -> Document:
    kept = [s for i, s in enumerate(statements(document)) if i != index]
    return {**document, "Statement": kept}


def unused_in(statement: Document, requests: list[IamRequest]) -> list[str]:
    """The ``Action`` and ``Resource`` entries of ``statement`` that match none of ``requests`` (IAM's ``*`` and ``?``
    wildcards; actions case-insensitively), each named ``action …`` or ``resource …``."""
    found = []
    for kind, entries, named in (
        ("action", statement.get("Action", []), [r.action.lower() for r in requests]),
        ("resource", statement.get("Resource", []), [r.resource for r in requests]),
    ):
        for entry in [entries] if isinstance(entries, str) else entries:
            pattern = wildcard(entry.lower() if kind == "action" else entry)
            if not any(pattern.fullmatch(n) for n in named):
                found.append(f"{kind} {entry}")
    return found


@cache
def wildcard(entry: str) -> re.Pattern[str]:
    """An IAM wildcard (``*``: any run of characters, ``?``: one) as a regular expression."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in entry))
