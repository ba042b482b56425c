"""The machine tags of a run that several workers share (the study's parent run).

Each worker adds its machine and GPUs (:func:`tracker.measure.host.machine_tags`) to the
parent: GPU lists are united, and a machine fact that differs between workers (another CPU,
driver or version) is kept as ``a | b`` with ``tracker.host.mixed = true``, so that a study
measured on different machines says so where its results are read.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlflow import MlflowClient

from tracker.measure.host import merge_tags
from tracker.tracking.runs import mlflow_call, set_tags


def record_machine(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    """Fold ``tags`` (one worker's machine tags) into run ``run_id``'s."""
    old = mlflow_call("read a run", client.get_run, run_id).data.tags
    changed = merge_tags(old, tags)
    if changed:
        set_tags(client, run_id, changed)
