"""What the parent run holds besides the report: the trials as an MLflow table, the spec as
``study.yaml`` (its secrets masked: :func:`spec_text`), and the saved view of the experiment
(tracking/view.py).

``trials.json`` is the table of :func:`tracker.tracking.report.trials_csv` in the format of
``MlflowClient.log_table`` (pandas ``split`` orient, listed in the run's
``mlflow.loggedArtifacts`` tag), so the run's artifact page shows it as a table and the runs
page's artifact view compares it. The last writer replaces it (every worker of a study writes
the report when it ends).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence

import yaml
from mlflow import MlflowClient
from yaml.nodes import MappingNode, Node, ScalarNode

from tracker.redact import (
    MASK,
    mask_header,
    mask_headers,
    redact_text,
    redact_values,
    secret_header_values,
)
from tracker.spec.yaml_loader import compose_yaml, load_yaml
from tracker.tracking.report import trials_csv
from tracker.tracking.runs import log_files, mlflow_call, set_tags
from tracker.trial_record import TrialRow

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
    tags = mlflow_call("read the run", client.get_run, run_id).data.tags
    listed = json.loads(tags.get(LOGGED_ARTIFACTS, "[]"))
    entry = {"path": TABLE_FILE, "type": "table"}
    if entry not in listed:
        set_tags(client, run_id, {LOGGED_ARTIFACTS: json.dumps([*listed, entry])})


def spec_text(source_text: str | None, dumped: str) -> str:
    """The spec as the user wrote it, else ``dumped`` (the validated spec as YAML), with its
    secrets masked: URLs and free-text credentials through :func:`redact_text`, and the value
    of every ``server.headers`` entry (harmless ones aside, tracker/redact.py) replaced by
    ``***`` where it stands and wherever else it appears. When the masked source does not
    read back with every such value masked (a value the masking cannot find, e.g. one written
    with YAML escapes or merged in from an anchor), the validated spec is logged instead, its
    headers masked: comments are lost, the secrets never leak."""
    data = _read(dumped)
    headers = _headers(data)
    secrets = secret_header_values(headers)
    if not secrets:
        return redact_text(source_text if source_text is not None else dumped)
    if source_text is not None:
        masked = _mask_source(source_text)
        if masked is not None and _masked_everywhere(masked):
            return redact_values(masked, secrets)
    assert isinstance(data, dict)  # it has headers
    safe = {**data, "server": {**data["server"], "headers": mask_headers(headers)}}
    return redact_values(yaml.safe_dump(safe, sort_keys=False), secrets)


#: a YAML node's anchor and tag, in front of its value
_PROPERTIES = re.compile(r"(?:[&!]\S*\s+)+")


def _read(text: str) -> object:
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return None


def _headers(data: object) -> dict[str, object]:
    """``server.headers`` of spec data, or {}."""
    server = data.get("server") if isinstance(data, dict) else None
    headers = server.get("headers") if isinstance(server, dict) else None
    return {str(k): v for k, v in headers.items()} if isinstance(headers, dict) else {}


def _entry(node: Node | None, key: str) -> Node | None:
    """The value node of ``key`` in a mapping node (None when absent or not a mapping)."""
    if not isinstance(node, MappingNode):
        return None
    return next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key),
                None)


def _mask_source(text: str) -> str | None:
    """``text`` with each secret header value's YAML scalar replaced by ``"***"`` (an aliased
    value where its anchor defines it); None when the text cannot be read."""
    try:
        headers = _entry(_entry(compose_yaml(text), "server"), "headers")
    except yaml.YAMLError:
        return None
    spans: set[tuple[int, int]] = set()
    if isinstance(headers, MappingNode):
        for key, value in headers.value:
            if isinstance(key, ScalarNode) and isinstance(value, ScalarNode) and \
                    mask_header(str(key.value), value.value) == MASK:
                spans.add((value.start_mark.index, value.end_mark.index))
    for start, end in sorted(spans, reverse=True):
        old = text[start:end]
        keep = _PROPERTIES.match(old)  # its anchor (`&tok`) and tag stay: aliases name it
        tail = "\n" if old.endswith("\n") else ""
        text = f'{text[:start]}{keep.group(0) if keep else ""}"{MASK}"{tail}{text[end:]}'
    return text


def _masked_everywhere(text: str) -> bool:
    """Whether ``text`` reads back with every secret header value masked."""
    headers = _headers(_read(text))
    return bool(headers) and all(v == MASK for k, v in headers.items()
                                 if mask_header(k, v) == MASK)
