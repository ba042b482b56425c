"""A pipeline study as the study side logs it (tracker.tracking.winner's contract),
made with MLflow's own client: an ensemble of two Python-backend models, the entry's output a
string.

    <p>scale   INPUT0 FP32 [4] -> OUTPUT0 = INPUT0 * parameters.SCALE (initialize raises when
               SCALE is no number: a config Triton accepts and the model refuses)
    <p>label   INPUT0 FP32 [4] -> LABEL TYPE_STRING [1] = "<parameters.TAG>:<sum of INPUT0>"
    <p>pipe    ensemble: INPUT -> scale -> label -> LABEL

So [1, 2, 3, 0] answers ``v1:6.0`` with SCALE 1 and TAG v1, ``v2:12.0`` with SCALE 2, TAG v2.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import optuna

from tests.support.formats import SCALE_MODEL
from tracker import tags

SCALE_PY = SCALE_MODEL  # x * parameters.SCALE; initialize raises when SCALE is no number

LABEL_PY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tag = config["parameters"]["TAG"]["string_value"]

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            labels = np.array([[f"{self.tag}:{row.sum():.1f}".encode()] for row in x],
                              dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("LABEL", labels)]))
        return out
'''


def scale_config(name: str, scale: str, *, refused: bool = False) -> str:
    # refused: a preferred batch size above max_batch_size, which Triton rejects on reading
    preferred = " preferred_batch_size: [ 32 ]" if refused else ""
    return f'''name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{{preferred} }}
parameters {{ key: "SCALE" value: {{ string_value: "{scale}" }} }}
'''


def label_config(name: str, tag: str, *, broken: bool = False) -> str:
    # broken: no TAG parameter, so initialize raises KeyError (Triton accepts the config)
    params = "" if broken else f'parameters {{ key: "TAG" value: {{ string_value: "{tag}" }} }}'
    return f'''name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{params}
'''


def ensemble_config(name: str, scale: str, label: str, *, wrong_tensor: bool = False) -> str:
    # wrong_tensor: a step maps an output the composing model does not have (Triton refuses)
    out = "NOPE" if wrong_tensor else "OUTPUT0"
    return f'''name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{scale}" model_version: -1
      input_map {{ key: "INPUT0" value: "INPUT" }}
      output_map {{ key: "{out}" value: "scaled" }} }},
    {{ model_name: "{label}" model_version: -1
      input_map {{ key: "INPUT0" value: "scaled" }}
      output_map {{ key: "LABEL" value: "LABEL" }} }}
  ]
}}
'''


@dataclass(frozen=True)
class Names:
    """The three model names of one pipeline (a prefix keeps pipelines of one server apart)."""

    prefix: str = ""

    @property
    def scale(self) -> str:
        return f"{self.prefix}scale"

    @property
    def label(self) -> str:
        return f"{self.prefix}label"

    @property
    def entry(self) -> str:
        return f"{self.prefix}pipe"

    @property
    def order(self) -> list[str]:
        return [self.scale, self.label, self.entry]


X = np.array([[1.0, 2.0, 3.0, 0.0]], dtype=np.float32)


def stored_folder(root: Path, names: Names, onnx: Path | None = None) -> Path:
    """The study's model files, stored once: one folder holding each model's directory
    without its config.pbtxt (the ensemble has no files: its empty 1/ is there, as a copy of
    the repository would have it); with ``onnx``, the scale step is that ONNX file, stored
    as ``<scale>/1/model.onnx``."""
    folder = root / "pipeline"
    for name, script in ((names.scale, SCALE_PY), (names.label, LABEL_PY)):
        (folder / name / "1").mkdir(parents=True)
        if onnx is not None and name == names.scale:
            shutil.copyfile(onnx, folder / name / "1" / "model.onnx")
        else:
            (folder / name / "1" / "model.py").write_text(script)
    (folder / names.entry / "1").mkdir(parents=True)
    return folder


def onnx_config(onnx: Path, name: str) -> str:
    """An ONNX step's production config (backend onnxruntime), as a trial logs it."""
    from tracker.triton import model_config
    from tracker.triton.formats.onnx import from_onnx
    from tracker.triton.repository import production_config

    cfg = model_config.apply(from_onnx(onnx, name), {"max_batch_size": 8})
    return model_config.dumps(production_config(cfg))


def configs(names: Names, version: dict[str, Any], onnx: Path | None = None) -> dict[str, str]:
    """Each model's production config for a trial's knobs: SCALE, TAG, and the ways to break
    it (``broken``: scale's initialize raises; ``label_broken``: label's does; ``refused``:
    Triton rejects the scale config; ``wrong_tensor``: Triton rejects the ensemble); with
    ``onnx`` the scale step is ONNX."""
    scale = "boom" if version.get("broken") else str(version["scale"])
    return {
        names.scale: (onnx_config(onnx, names.scale) if onnx is not None else
                      scale_config(names.scale, scale, refused=bool(version.get("refused")))),
        names.label: label_config(names.label, version["tag"],
                                  broken=bool(version.get("label_broken"))),
        names.entry: ensemble_config(names.entry, names.scale, names.label,
                                     wrong_tensor=bool(version.get("wrong_tensor"))),
    }


class PipelineStudy:
    """A real Optuna study whose trials carry what the study side logs for a pipeline: the
    parent run holds the stored model folder (study_model/pipeline/) and best/; each trial
    run has the tags tracker.models, tracker.entry_model, tracker.model_files,
    tracker.model_sha256 and the artifacts configs/<model>/config.pbtxt. ``entries``: a study
    of several independent entry models instead (e.g. scale and label, no ensemble): the
    study side lists them last in tracker.models and names the first as tracker.entry_model."""

    def __init__(self, tmp: Path, tracking_uri: str, names: Names, study_name: str, *,
                 onnx: Path | None = None, entries: list[str] | None = None) -> None:
        self.tmp, self.names, self.onnx = tmp, names, onnx
        self.order = entries or names.order
        self.entry = entries[0] if entries else names.entry
        self.storage = f"sqlite:///{tmp / 'optuna.db'}"
        self.study = optuna.create_study(study_name=study_name, storage=self.storage,
                                         direction="maximize")
        self.study.set_user_attr("objectives", {"perf_throughput": "maximize"})
        self.client = mlflow.MlflowClient(tracking_uri)
        self.exp = self.client.create_experiment(study_name)
        self.parent = self.client.create_run(self.exp).info.run_id
        folder = stored_folder(tmp / "stored", names, onnx)
        self.client.log_artifacts(self.parent, str(folder), f"study_model/{folder.name}")
        self.sha = "0" * 64
        self.trial_configs: dict[int, dict[str, str]] = {}

    def add(self, version: dict[str, Any], throughput: float) -> int:
        run = self.client.create_run(self.exp, tags={tags.PARENT: self.parent}).info.run_id
        n = len(self.study.trials)
        texts = {m: t for m, t in configs(self.names, version, self.onnx).items()
                 if m in self.order}
        self.trial_configs[n] = texts
        for model, text in texts.items():
            self.client.log_text(run, text, f"configs/{model}/config.pbtxt")
        for key, value in {tags.MODELS: json.dumps(self.order),
                           tags.ENTRY_MODEL: self.entry,
                           tags.MODEL_FILES: f"runs:/{self.parent}/study_model",
                           tags.MODEL_SHA256: self.sha}.items():
            self.client.set_tag(run, key, value)
        trial = self.study.ask()
        for key, value in {"mlflow_run_id": run, "feasible": True, "baseline": n == 0,
                           "measurements": 3, "concurrency": 4,
                           "metrics": {"perf_throughput": throughput,
                                       "perf_latency_p99": 2.5}}.items():
            trial.set_user_attr(key, value)
        self.study.tell(trial, throughput)
        best = max(self.trial_configs, key=lambda k: self.study.trials[k].value or 0)
        for model, text in self.trial_configs[best].items():
            self.client.log_text(self.parent, text, f"best/{model}/config.pbtxt")
        self.client.log_text(self.parent, self.trial_configs[best][self.entry],
                             "best/config.pbtxt")
        return n
