"""Every rendering of a Spark plan that can reach a log, an event log or a screen: what the tests of "no key material,
no credential in any plan" search."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame

EXPLAIN_MODES = ("simple", "extended", "codegen", "cost", "formatted")


def plan_renderings(frame: DataFrame, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``frame``'s plan as the event log records it (the query execution, the executed plan, the optimized plan as
    JSON) and as ``explain`` prints it in each mode, by name."""
    execution = frame._jdf.queryExecution()
    renderings = {
        "queryExecution": execution.toString(),
        "executedPlan": execution.executedPlan().toString(),
        "optimizedPlan JSON": execution.optimizedPlan().toJSON(),
    }
    for mode in EXPLAIN_MODES:
        frame.explain(mode=mode)
        renderings[f"explain {mode}"] = capsys.readouterr().out
    return renderings
