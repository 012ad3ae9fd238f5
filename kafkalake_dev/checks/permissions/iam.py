"""IAM evaluation of recorded requests against what a template deploys, by ``@cloud-copilot/iam-simulate``
(AGPL-3.0-or-later, a test-only tool run unmodified from the download cache: docs/testing.md says why that is
acceptable). One ``node`` process evaluates a whole batch; each request is one simulation of one resource.

How AWS decides, as the simulations are set up:
- the principal signs as its role's session; ``aws:PrincipalArn`` (the role) is passed explicitly because the
  simulator does not fill it in;
- an S3 request is decided by the role's identity policies and the bucket's policy, a Secrets Manager request by
  the identity policies and the secret's resource policy, if any;
- a KMS request by the key policy and the identity policies (same account: a key policy without the account's
  "Enable IAM policies" statement admits only the principals it names); a request S3 makes on the principal's
  behalf for SSE-KMS (``via``) carries ``kms:ViaService``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from kafkalake_dev.checks.permissions.requests import IamRequest
from kafkalake_dev.checks.permissions.templates import Document, Policies

SIMULATOR_SOURCE: Final = Path(__file__).with_name("simulator")
SIMULATOR_FILES: Final = ("package.json", "package-lock.json", "simulate.mjs")
Outcome = Literal["Allowed", "ExplicitlyDenied", "ImplicitlyDenied", "Error"]


@dataclass(frozen=True)
class StatementRef:
    """One statement of one policy: an identity policy by name, or a resource policy by the resource's ARN."""

    policy: str
    index: int
    """0-based position in the policy's ``Statement`` list."""
    resource_policy: bool = False

    def describe(self, document: Document | None = None) -> str:
        sid = statements(document)[self.index].get("Sid") if document else None
        where = (
            f"the resource policy of {self.policy}" if self.resource_policy else f"the identity policy {self.policy}"
        )
        return f"statement {sid or '#' + str(self.index + 1)} of {where}"


@dataclass(frozen=True)
class Decision:
    request: IamRequest
    outcome: Outcome
    grants: tuple[StatementRef, ...] = ()
    """The statements that allowed it (empty unless ``Allowed``)."""
    reason: str = ""
    """Why it is not allowed, for the finding."""


@dataclass(frozen=True)
class Finding:
    """A request the deployed policies would refuse, and what is missing."""

    principal: str
    action: str
    resource: str
    missing: str
    call: str = ""
    context: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        came_from = f" (from {self.call})" if self.call else ""
        return f"{self.principal}: {self.action} on {self.resource}{came_from}: {self.missing}"


def evaluate_iam(requests: Iterable[IamRequest], policies: Policies) -> list[Finding]:
    """The requests the deployed policies refuse, one finding each (duplicates are evaluated once)."""
    return [
        Finding(d.request.principal, d.request.action, d.request.resource, d.reason, d.request.call, d.request.context)
        for d in decide(requests, policies)
        if d.outcome != "Allowed"
    ]


def decide(requests: Iterable[IamRequest], policies: Policies) -> list[Decision]:
    """Each distinct request's outcome and, if allowed, the statements that allowed it."""
    unique = list({r.key(): r for r in requests}.values())
    if not unique:
        return []
    answers = run_simulator([simulation(r, policies) for r in unique])
    return [decision(r, a, policies) for r, a in zip(unique, answers, strict=True)]


def simulation(request: IamRequest, policies: Policies) -> dict[str, Any]:
    """iam-simulate's ``Simulation`` for one request."""
    role = policies.roles.get(request.principal)
    if role is None:
        raise KeyError(f"the template has no principal {request.principal!r}")
    where = policies.deployment
    context: dict[str, Any] = {
        "aws:PrincipalArn": role.arn,
        "aws:PrincipalAccount": role.arn.split(":")[4],
        "aws:SecureTransport": "true",
        **request.context,
    }
    if request.via:
        context["kms:ViaService"] = f"{request.via}.{where.region}.amazonaws.com"
    simulated: dict[str, Any] = {
        "request": {
            "principal": role.session_arn(),
            "action": request.action,
            "resource": {"resource": request.resource, "accountId": where.account},
            "contextVariables": context,
        },
        "identityPolicies": [{"name": name, "policy": doc} for name, doc in role.identity.items()],
    }
    owned = policies.resource_policy(request.resource)
    if owned is not None:
        simulated["resourcePolicy"] = owned[1]
    return simulated


def decision(request: IamRequest, answer: dict[str, Any], policies: Policies) -> Decision:
    outcome: Outcome = answer["result"]
    if outcome == "Error":
        return Decision(request, outcome, reason=f"iam-simulate cannot evaluate it: {json.dumps(answer['errors'])}")
    owned = policies.resource_policy(request.resource)
    grants = tuple(
        StatementRef(owned[0], g["statementIndex"] - 1, True)
        if g["policyType"] == "resource" and owned is not None
        else StatementRef(g["policyIdentifier"], g["statementIndex"] - 1)
        for g in answer["grants"]
    )
    if outcome == "Allowed":
        return Decision(request, outcome, grants)
    return Decision(request, outcome, reason=denial_reason(request, answer["denials"], policies))


def denial_reason(request: IamRequest, denials: list[dict[str, Any]], policies: Policies) -> str:
    """What is missing, in the terms of the policy that decides: an explicit Deny names its statement."""
    owned = policies.resource_policy(request.resource)
    explicit = [d for d in denials if d["denialType"] == "Explicit"]
    if explicit:
        d = explicit[0]
        is_resource = d["policyType"] == "resource" and owned is not None
        name = owned[0] if is_resource and owned else d.get("policyIdentifier", "?")
        document = owned[1] if is_resource and owned else policies.roles[request.principal].identity.get(name)
        return "denied explicitly by " + StatementRef(name, d["statementIndex"] - 1, is_resource).describe(document)
    if request.action.startswith("kms:") and any(d["policyType"] == "resource" for d in denials):
        return f"the {request.resource.rsplit('/', 1)[-1]} key's policy does not admit it"
    bucket = f" (nor does the resource policy of {owned[0]})" if owned else ""
    return f"no statement of the {request.principal}'s identity policy allows it{bucket}"


def statements(document: Document | None) -> list[Document]:
    if document is None:
        return []
    found = document.get("Statement", [])
    return [found] if isinstance(found, dict) else list(found)


def run_simulator(simulations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``node`` process for the batch; an answer per simulation, in order."""
    process = subprocess.run(
        ["node", str(ensure_simulator() / "simulate.mjs")],
        input=json.dumps(simulations),
        capture_output=True,
        text=True,
        check=False,
    )
    if process.returncode != 0:
        raise RuntimeError(f"iam-simulate failed ({process.returncode}): {process.stderr[-2000:]}")
    answers: list[dict[str, Any]] = json.loads(process.stdout)
    return answers


def cache_root() -> Path:
    return Path(os.environ.get("KAFKALAKE_CACHE", Path.home() / ".cache" / "kafkalake"))


def simulator_dir(cache: Path | None = None) -> Path:
    """Where the pinned simulator is installed: the download cache, keyed by the pins and the runner script."""
    root = cache or cache_root()
    digest = hashlib.sha256(b"".join((SIMULATOR_SOURCE / f).read_bytes() for f in SIMULATOR_FILES)).hexdigest()
    return root / "tools" / f"iam-simulate-{digest[:12]}"


def ensure_simulator(cache: Path | None = None) -> Path:
    """Install the pinned ``@cloud-copilot/iam-simulate`` (package-lock.json) into the cache once, with ``npm ci``;
    the clone gets no node_modules. ``python -m kafkalake_dev.checks.permissions.iam`` runs it (``make test``)."""
    target = simulator_dir(cache)
    if (target / ".installed").exists():
        return target
    staging = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in SIMULATOR_FILES:
        shutil.copy(SIMULATOR_SOURCE / name, staging / name)
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
        cwd=staging,
        env={**os.environ, "npm_config_cache": str((cache or cache_root()) / "npm")},
        check=True,
    )
    (staging / ".installed").touch()
    try:
        staging.rename(target)
    except OSError:  # another process (a pytest-xdist worker) installed the same pins first
        shutil.rmtree(staging)
    return target


if __name__ == "__main__":
    print(ensure_simulator())
