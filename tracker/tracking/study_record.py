"""What the parent run holds besides the report: the trials as an MLflow table, the spec as
``study.yaml``, and the saved view of the experiment (tracking/view.py).

``trials.json`` is the table of :func:`tracker.tracking.report.trials_csv` in the format of
``MlflowClient.log_table`` (pandas ``split`` orient, listed in the run's
``mlflow.loggedArtifacts`` tag), so the run's artifact page shows it as a table and the runs
page's artifact view compares it. The last writer replaces it (``log_table`` would append:
every worker of a study writes the report when it ends).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

from mlflow import MlflowClient

from tracker.tracking.redact import redact_text
from tracker.tracking.report import TrialRow, trials_csv
from tracker.tracking.runs import _call, log_files

TABLE_FILE = "trials.json"
SPEC_FILE = "study.yaml"


def log_trials_table(client: MlflowClient, run_id: str, rows: Sequence[TrialRow],
                     objectives: Mapping[str, str]) -> None:
    import pandas as pd

    frame = pd.read_csv(io.StringIO(trials_csv(rows, objectives)), keep_default_na=False)
    names = {f.path for f in _call("list artifacts", client.list_artifacts, run_id)}
    if TABLE_FILE in names:
        log_files(client, run_id, {TABLE_FILE: frame.to_json(orient="split", index=False)})
    else:
        _call("log the trials table", client.log_table, run_id, data=frame,
              artifact_file=TABLE_FILE)


def spec_text(source_text: str | None, dumped: str) -> str:
    """The spec as the user wrote it (secrets masked), else the validated spec dumped."""
    return redact_text(source_text if source_text is not None else dumped)
