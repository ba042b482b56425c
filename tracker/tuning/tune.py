"""``tracker tune``: the search, the confirmation on the last worker to finish, the
conclusion. One study's whole run, as ``mlflow run .`` and the CLI start it."""

from __future__ import annotations

from pathlib import Path

from tracker.confirm.rounds import after_search
from tracker.invocation.session import TuneOptions
from tracker.tuning.loop import TuneResult, run_study


def tune(spec_path: str | Path, options: TuneOptions | None = None) -> TuneResult:
    """Run or resume the study of ``spec_path`` and confirm its best (when the spec's
    ``confirm`` section is on). Raises TrackerError for user-facing failures and
    :class:`~tracker.lifecycle.Interrupted` after Ctrl-C / SIGTERM."""
    return run_study(spec_path, options, after_search=after_search)
