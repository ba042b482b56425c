"""What the parent run holds besides the report: the trials as an MLflow table, the spec as
``study.yaml``, and the saved view of the experiment (tracking/view.py).

``trials.json`` is the table of :func:`tracker.tracking.report.trials_csv` in the format of
``MlflowClient.log_table`` (pandas ``split`` orient, listed in the run's
``mlflow.loggedArtifacts`` tag), so the run's artifact page shows it as a table and the runs
page's artifact view compares it. The last writer replaces it (every worker of a study writes
the report when it ends).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence

from mlflow import MlflowClient

from tracker.tracking.redact import redact_text
from tracker.tracking.report import trials_csv
from tracker.tracking.rows import TrialRow
from tracker.tracking.runs import _call, log_files, set_tags

TABLE_FILE = "trials.json"
SPEC_FILE = "study.yaml"
LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"  # MLflow's list of a run's table artifacts


def log_trials_table(client: MlflowClient, run_id: str, rows: Sequence[TrialRow],
                     objectives: Mapping[str, str]) -> None:
    """``trials.json`` written as ``log_table`` writes it (its own call would append to an
    earlier file, and trips pandas 3's string-dtype deprecation), listed in the run's
    ``mlflow.loggedArtifacts`` tag as a table."""
    import pandas as pd

    frame = pd.read_csv(io.StringIO(trials_csv(rows, objectives)), keep_default_na=False)
    log_files(client, run_id, {TABLE_FILE: frame.to_json(orient="split", index=False)})
    tags = _call("read the run", client.get_run, run_id).data.tags
    listed = json.loads(tags.get(LOGGED_ARTIFACTS, "[]"))
    entry = {"path": TABLE_FILE, "type": "table"}
    if entry not in listed:
        set_tags(client, run_id, {LOGGED_ARTIFACTS: json.dumps([*listed, entry])})


def spec_text(source_text: str | None, dumped: str) -> str:
    """The spec as the user wrote it (secrets masked), else the validated spec dumped."""
    return redact_text(source_text if source_text is not None else dumped)
