"""The MLflow UI opens on the study: a saved view on the experiment, and the link to it.

A saved view of the runs page (MLflow 3.17) is an experiment tag
``mlflow.sharedViewState.<view id>`` whose value is JSON ``{"name", "createdAt", "state"}``,
``state`` itself JSON of the page state. The study's view (its id is the parent run's id: each
parent has its own, and the views of parents a resumed study superseded are removed):

- rows: the parent's children (the trials), every one shown, sorted by the first objective
  (best first);
- columns: the searched knobs (params under their field paths), the headline metrics, the
  chosen concurrency, feasibility;
- charts: throughput against p99 latency (scatter), parallel coordinates of the knobs
  coloured by the first objective, and ``sweep/perf_throughput`` / ``sweep/perf_latency_p99``
  against their step (= concurrency); for a streaming model also the time to first token
  (p99) and inter-token latency (p50) against concurrency, and those as columns.

:func:`study_link` says how to open it: the tracking server's URL when the tracking URI is
http(s), else the ``mlflow ui`` command for the store and the address to open.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tracker.measure.kinds.streaming import Streaming
from tracker.redact import redact_url
from tracker.tracking.runs import PARENT_TAG, SUPERSEDED_BY, SWEEP_PREFIX, mlflow_call

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
MAX_VIEW_CHARS = 20_000
HEADLINE = ("perf_throughput", "perf_latency_p99", "perf_latency_p50", "perf_latency_avg",
            "concurrency")
STREAM_HEADLINE = Streaming.shown  # what the streaming load kind says a view shows first
UI_ADDRESS = "http://127.0.0.1:5000"
_SECTION = "tracker-study"


def _q(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"


def view_state(parent_run_id: str, knobs: Sequence[str],
               objectives: Mapping[str, str], *, streaming: bool = False) -> dict[str, object]:
    """The runs-page state of the study's view (see the module docstring)."""
    first, direction = next(iter(objectives.items()))
    metrics = list(dict.fromkeys([*objectives, *(STREAM_HEADLINE if streaming else ()),
                                  *HEADLINE]))
    columns = ([_q("params", k) for k in knobs] + [_q("metrics", m) for m in metrics]
               + [_q("tags", "tracker.feasible"), _q("tags", "tracker.baseline")])
    def card(uuid: str, kind: str, **fields: object) -> dict[str, object]:
        return {"uuid": uuid, "type": kind, "runsCountToCompare": 100,
                "metricSectionId": _SECTION, "deleted": False, "isGenerated": False,
                **fields}

    def line(uuid: str, metric: str) -> dict[str, object]:
        return card(uuid, "LINE", displayName=f"{metric} against concurrency",
                    metricKey=metric, selectedMetricKeys=[metric], xAxisKey="step",
                    selectedXAxisMetricKey="", lineSmoothness=0, scaleType="linear",
                    xAxisScaleType="log", displayPoints=True, useGlobalXaxisKey=False,
                    useGlobalLineSmoothing=False, yAxisKey="metric", yAxisExpressions=[],
                    ignoreOutliers=False)

    charts = [
        card("tracker-tradeoff", "SCATTER", displayName="throughput vs p99 latency",
             xaxis={"key": "perf_latency_p99", "type": "METRIC"},
             yaxis={"key": "perf_throughput", "type": "METRIC"}),
        card("tracker-parallel", "PARALLEL", displayName=f"knobs, coloured by {first}",
             selectedParams=list(knobs), selectedMetrics=[first], showAllRuns=True),
        line("tracker-sweep-throughput", SWEEP_PREFIX + "perf_throughput"),
        line("tracker-sweep-p99", SWEEP_PREFIX + "perf_latency_p99"),
    ]
    if streaming:  # what the streaming load kind draws against the level
        charts += [line(f"tracker-sweep-{metric}", SWEEP_PREFIX + metric)
                   for metric in Streaming.plotted]
    return {
        "searchFilter": f"tags.`{PARENT_TAG}` = '{parent_run_id}'",
        "orderByKey": _q("metrics", first),
        "orderByAsc": direction != "maximize",
        "selectedColumns": columns,
        "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": charts,
        "compareRunSections": [{"uuid": _SECTION, "name": "Study", "display": True,
                                "isReordered": False, "deleted": False,
                                "isGenerated": False}],
        "isAccordionReordered": False,
    }


def write_view(client: MlflowClient, experiment_id: str, parent_run_id: str, *, name: str,
               knobs: Sequence[str], objectives: Mapping[str, str],
               streaming: bool = False) -> str:
    """Write the study's saved view on the experiment; returns the view id."""
    state = view_state(parent_run_id, knobs, objectives, streaming=streaming)
    value = json.dumps({"name": name[:200], "createdAt": int(time.time() * 1000),
                        "state": json.dumps(state)})
    if len(value) > MAX_VIEW_CHARS:  # very many knobs: keep the table, drop the charts
        state["compareRunCharts"] = []
        value = json.dumps({"name": name[:200], "createdAt": int(time.time() * 1000),
                            "state": json.dumps(state)})
    mlflow_call("save the study's view", client.set_experiment_tag, experiment_id,
          VIEW_TAG_PREFIX + parent_run_id, value)
    return parent_run_id


def drop_superseded_views(client: MlflowClient, experiment_id: str) -> int:
    """Remove the saved views of parent runs a rerun superseded (their trials moved to the new
    parent, so those views would list nothing); returns how many were removed."""
    tags = mlflow_call("read the experiment", client.get_experiment, experiment_id).tags
    dropped = 0
    for key in [k for k in tags if k.startswith(VIEW_TAG_PREFIX)]:
        try:
            run = client.get_run(key[len(VIEW_TAG_PREFIX):])
        except MlflowException:
            continue  # not a study's view (a user's own): leave it
        if run.data.tags.get(SUPERSEDED_BY):
            mlflow_call("remove a superseded view", client.delete_experiment_tag,
                        experiment_id, key)
            dropped += 1
    return dropped


def view_fragment(experiment_id: str, view_id: str) -> str:
    """The part of the UI address after the host: the runs table with the saved view."""
    return (f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&compareRunsMode=TABLE&viewStateShareKey={view_id}")


def _absolute_sqlite(uri: str) -> str:
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/") and ":memory:" not in uri:
        return prefix + str((Path.cwd() / uri[len(prefix):]).resolve())
    return uri


def study_link(tracking_uri: str, experiment_id: str, view_id: str) -> str:
    """How to open the study's view: one line for a tracking server, two for a local store."""
    fragment = view_fragment(experiment_id, view_id)
    if tracking_uri.startswith(("http://", "https://")):
        return f"MLflow: {redact_url(tracking_uri).rstrip('/')}/{fragment}"
    store = redact_url(_absolute_sqlite(tracking_uri))
    return (f"MLflow: run `mlflow ui --backend-store-uri {store}` and open "
            f"{UI_ADDRESS}/{fragment}")
