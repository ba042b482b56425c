"""``tracker profile``: measure one configuration over the spec's load sweep, as one MLflow run.

The configuration is the model's default config, or the default with field paths set
(``instance_group.count=2``). The run (``MLFLOW_RUN_ID`` under ``mlflow run``, else a new one
in the spec's experiment) gets the assignments as params, the headline metrics at the best
concurrency that meets the constraints, the sweep (``sweep/<metric>``, step = concurrency),
``config.pbtxt`` (what the server loaded), ``perf.csv`` and ``server.log`` (and
``production_config.pbtxt`` when the shim served it): the artifacts of a trial
(pipeline.measure_configuration).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Param

from tracker.errors import TrackerError
from tracker.measure.host import machine_tags
from tracker.measure.types import Measurement
from tracker.search.objective import LevelChoice
from tracker.spec import ensure_model, load_spec
from tracker.study.loop import (
    Interrupted,
    TuneOptions,
    apply_overrides,
    received_signal,
    shielded,
    signals,
    tracking_uri,
)
from tracker.study.measured import ConfigFailed, levels_for, measure_configuration
from tracker.tracking import runs
from tracker.triton import model_config as mc
from tracker.triton.formats import model_info
from tracker.triton.server.modes import make_server


@dataclass(frozen=True)
class ProfileResult:
    run_id: str
    measurements: list[Measurement]
    choice: LevelChoice
    config_text: str


def profile(spec_path: str | Path, values: Mapping[str, object], *,
            server_overrides: Mapping[str, object] | None = None,
            config_path: Path | None = None, levels: Sequence[float] | None = None,
            backend: str = "builtin") -> ProfileResult:
    """Measure the spec's model with ``values`` applied (field path -> value). Ctrl-C or
    SIGTERM: the server stops, the run ends KILLED and :class:`Interrupted` is raised.
    ``config_path``: a config.pbtxt used instead of ``model.config`` as the base config;
    ``levels``: concurrencies (or rates) instead of the spec's; ``backend``: "builtin" or
    "perf_analyzer"."""
    with signals():
        return _profile(spec_path, values, server_overrides, config_path, levels, backend)


def _profile(spec_path: str | Path, values: Mapping[str, object],
             server_overrides: Mapping[str, object] | None, config_path: Path | None = None,
             levels: Sequence[float] | None = None, backend: str = "builtin") -> ProfileResult:
    spec = apply_overrides(load_spec(spec_path), TuneOptions(server=dict(server_overrides or {})))
    if config_path is not None:
        spec.model.config = Path(config_path).resolve()
    ensure_model(spec)
    info = model_info(spec.model)
    config_values, load_values = mc.split_params(values)
    cfg = mc.apply(info, config_values) if config_values else info.config
    uri = tracking_uri(spec)
    client = MlflowClient(tracking_uri=uri)
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        exp = client.get_experiment_by_name(spec.experiment_name)
        exp_id = exp.experiment_id if exp else client.create_experiment(spec.experiment_name)
        run_id = client.create_run(exp_id, run_name=f"profile-{spec.model.name}",
                                   tags={runs.ROLE: "profile"}).info.run_id
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in values.items()])
    server = make_server(spec.server)
    work = Path(tempfile.mkdtemp(prefix="tracker-profile-"))
    status = "FAILED"
    try:
        try:
            done = measure_configuration(spec, info, server, cfg, work,
                                         levels=levels if levels is not None
                                         else levels_for(load_values), backend=backend)
        except ConfigFailed as failed:
            raise failed.cause from failed.cause.__cause__
        finally:
            server.stop()
        runs.set_tags(client, run_id, {**machine_tags(server.gpu_set()), **done.tags})
        runs.log_metrics(client, run_id, done.headline(), step=done.choice.concurrency,
                         extra=runs.sweep_metrics(done.measurements))
        runs.log_files(client, run_id, done.files())
        status = "FINISHED"
        return ProfileResult(run_id, done.measurements, done.choice, done.served_text)
    except KeyboardInterrupt as exc:
        status = "KILLED"
        signum = received_signal()
        raise Interrupted(signum, f"interrupted by {signal.Signals(signum).name}") from exc
    except TrackerError as err:
        with contextlib.suppress(Exception):
            runs.set_tags(client, run_id, {runs.NOTE_TAG: str(err)})
        raise
    finally:
        with shielded():
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(Exception):
                runs.finish_run(client, run_id, status)
