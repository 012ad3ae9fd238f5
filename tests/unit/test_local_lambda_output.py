"""Locally invoked Lambdas keep their structured output out of what a person reads: Powertools' JSON log lines and
the metrics' EMF documents go to the stack's ``logs/lambdas.log`` (``kafkalake_dev.local.maintainer``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_lambda_powertools.metrics import MetricUnit

from kafkalake_dev.local.maintainer import into_lambda_log, lambda_log
from lambdas.maintainer import handler
from lambdas.reconciler import handler as reconciler


def test_the_handlers_log_lines_and_metrics_go_to_the_log_file_not_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    own = handler.logger.registered_handler.stream  # type: ignore[attr-defined]
    with into_lambda_log() as path:
        handler.logger.info("drain finished")
        reconciler.logger.warning("a table lags")
        handler.metrics.add_metric(name="data_events", unit=MetricUnit.Count, value=3)
        handler.metrics.flush_metrics()
    assert capsys.readouterr().out == ""
    assert path == lambda_log() == tmp_path / "logs" / "lambdas.log"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("message") for line in lines[:2]] == ["drain finished", "a table lags"]
    assert lines[2]["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "data_events", "Unit": "Count"}]
    assert handler.logger.registered_handler.stream is own  # type: ignore[attr-defined] # its own stream again


def test_a_handler_made_with_a_stdout_closed_since_still_logs_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test runner closes the stdout it captured an earlier test with, which a handler made then still holds."""
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    registered = handler.logger.registered_handler
    closed = (tmp_path / "earlier-stdout").open("w")
    closed.close()
    monkeypatch.setattr(registered, "stream", closed)
    with into_lambda_log() as path:
        handler.logger.info("drain finished")
    assert [json.loads(line)["message"] for line in path.read_text().splitlines()] == ["drain finished"]
    assert registered.stream is closed  # type: ignore[attr-defined]
