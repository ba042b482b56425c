"""What NVIDIA's mlflow-triton plugin writes and its users read, kept by the `triton` target so
that its users switch without changing scripts (docs/migrate-nvidia-plugin.md):

- ``<repo>/<name>/mlflow-meta.json``: ``{name, triton_model_path, mlflow_model_uri, flavor}``,
  written on every deploy and read for deployments that plugin made (which have no
  ``deployment.json``);
- the keys of a ``list``/``get`` entry (``name``, ``flavor``, ``mlflow_model_uri``,
  ``triton_model_path``, ``state``/``status`` READY or UNAVAILABLE);
- predictions as ``{"outputs": {output name: nested list}}``, which ``mlflow deployments predict
  --output-path`` writes as is.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.deployments import PredictionsResponse

META_FILE = "mlflow-meta.json"
FLAVORS = ("triton", "onnx")


def write_meta(model_dir: Path, name: str, flavor: str, model_uri: str) -> None:
    """``mlflow-meta.json`` as NVIDIA's plugin writes it (replaced atomically)."""
    record = {"name": name, "triton_model_path": str(model_dir), "mlflow_model_uri": model_uri,
              "flavor": flavor}
    tmp = model_dir / f".{META_FILE}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(record, indent=4) + "\n")
    os.replace(tmp, model_dir / META_FILE)


def read_meta(model_dir: Path) -> dict[str, Any]:
    """The model directory's ``mlflow-meta.json``; {} when there is none or it does not parse."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((model_dir / META_FILE).read_text())
        if isinstance(data, dict):
            return data
    return {}


def entry_keys(model_dir: Path, state: str, meta: Mapping[str, Any],
               default_flavor: str) -> dict[str, Any]:
    """The keys NVIDIA's entries have, from our record (``meta``) or, for a deployment that
    plugin made, from its ``mlflow-meta.json``."""
    theirs = read_meta(model_dir)
    return {
        "flavor": meta.get("flavor") or theirs.get("flavor") or default_flavor,
        "status": state,
        "mlflow_model_uri": meta.get("model_uri") or theirs.get("mlflow_model_uri"),
        "triton_model_path": str(model_dir),
    }


def has_record(model_dir: Path, our_meta_file: str) -> bool:
    """Whether a deployment (ours or NVIDIA's plugin's) wrote this model directory; models
    put into the repository by other means are not deployments (NVIDIA's plugin lists only
    models with its record, too)."""
    return (model_dir / our_meta_file).is_file() or (model_dir / META_FILE).is_file()


class Predictions(PredictionsResponse):
    """``{"outputs": {output name: nested list}}``; ``["predictions"]`` (MLflow's key, what
    this target returned before, and what ``get_predictions`` reads) gives the same outputs
    without being written to JSON."""

    def __init__(self, outputs: Mapping[str, Any]) -> None:
        super().__init__({"outputs": dict(outputs)})

    def __missing__(self, key: str) -> Any:
        if key == "predictions":
            return self["outputs"]
        raise KeyError(key)
