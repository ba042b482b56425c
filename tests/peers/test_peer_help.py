"""The drop-ins' help, as their peers give it: ``tracker perf-analyzer -h | --help | -?`` and
``tracker model-analyzer profile|analyze|report --help | -h`` print the peer's flags, each
marked with what the tracker does with it and why, exit 0 and start nothing. No server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracker.cli import cli
from tracker.peers.ma_options import OPTIONS
from tracker.peers.model_analyzer import REPORT_OPTIONS
from tracker.peers.pa_flags import flag_rows
from tracker.peers.peer_help import PA_SECTIONS

MARKS = ("honoured", "translated", "accepted", "default only", "refused")


def _help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, str]:
    """The help's rows as {flags: text}, after checking it exits 0 and writes nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and list(tmp_path.iterdir()) == []
    rows: dict[str, str] = {}
    head = ""
    for line in result.stdout.splitlines():
        if line.startswith("  ") and not line.startswith(" " * 4):
            head, _, text = line.strip().partition("  ")
            rows[head] = text.strip()
        elif line.startswith(" " * 4) and head:
            rows[head] = (rows[head] + " " + line.strip()).strip()
    return rows


@pytest.mark.parametrize("flag", ["-h", "--help", "-?"])
def test_perf_analyzer_help_lists_every_flag_marked(flag: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _help(tmp_path, monkeypatch, "perf-analyzer", "-m", "add", flag)
    listed = {f for head in rows for f in head.split(", ")}
    documented = {f for _title, flags in PA_SECTIONS for f in flags}
    known = {f for forms, _ in flag_rows() for f in re.findall(r"`([^`]+)`", forms)}
    assert documented <= listed and known <= documented      # nothing read is left unlisted
    for head, text in rows.items():
        if head.startswith("-"):
            assert text.split(":")[0] in MARKS, (head, text)
    assert rows["-p, --measurement-interval"] == "translated: `load.window_ms` (5000)"
    assert rows["--streaming"].startswith("refused: a streaming model is measured")
    assert rows["-z"].startswith("translated:") and "load.input_fill" in rows["-z"]
    assert rows["--metrics-url"].startswith("accepted:")
    assert rows["-u"].startswith("honoured:")


@pytest.mark.parametrize(("command", "flag"), [("profile", "--help"), ("analyze", "-h")])
def test_model_analyzer_help_lists_every_option_marked(command: str, flag: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _help(tmp_path, monkeypatch, "model-analyzer", command, flag)
    for option in OPTIONS:
        head = ", ".join([*([f"-{option.short}"] if option.short else []),
                          option.flag or f"{option.key} (YAML)"])
        assert rows[head].split(":")[0] == option.mark, head
    assert rows["--perf-analyzer-timeout"].startswith(
        "default only: each request times out after `load.request_timeout_s`")
    assert rows["genai_perf_flags (YAML)"].startswith("refused: LLM profiling")
    assert rows["--latency-budget"] == "translated: `constraints.perf_latency_p99.max`"
    assert rows["-e, --export-path"].startswith("honoured: where results/ and reports/")


def test_model_analyzer_report_help_lists_its_options(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _help(tmp_path, monkeypatch, "model-analyzer", "report", "--help")
    assert {", ".join(flags) for flags, _key, _text in REPORT_OPTIONS} <= set(rows)
    assert rows["-n, --report-model-configs"].startswith("honoured:")
    assert rows["plots (YAML)"].startswith("refused:")
