"""``tracker profile``: measure one configuration over the spec's load sweep, as one MLflow run.

The configuration is the model's default config, or the default with field paths set
(``instance_group.count=2``). The run (``MLFLOW_RUN_ID`` under ``mlflow run`` when it is in the
spec's experiment or one the user chose, else a new one in the spec's experiment:
tracking/mlflow_run.py) gets the assignments as params, the headline metrics at the best
concurrency that meets the constraints, the sweep (``sweep/<metric>``, step = concurrency),
``config.pbtxt`` (what the server loaded), ``perf.csv`` and ``server.log`` (and
``production_config.pbtxt`` when the shim served it): the artifacts of a trial
(candidate/measurement.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Param, RunTag

from tracker.candidate.measurement import (
    Bench,
    CandidateConfig,
    ConfigFailed,
    Procedure,
    measure,
    resolve_serving,
)
from tracker.errors import ModelError, TrackerError
from tracker.invocation.session import Session, TuneOptions
from tracker.lifecycle import held
from tracker.measure.host import machine_tags
from tracker.measure.types import LoadClient, Measurement
from tracker.metrics import load_levels_from
from tracker.outputs.standalone import profile_check
from tracker.search.objective import LevelChoice
from tracker.tracking import mlflow_run, runs
from tracker.triton import model_config
from tracker.triton.formats import json_knobs


@dataclass(frozen=True)
class ProfileResult:
    run_id: str
    measurements: list[Measurement]
    choice: LevelChoice
    config_text: str
    #: each entry model's levels (one model: its own); several are measured together
    by_model: dict[str, list[Measurement]] = field(default_factory=dict)
    #: the entry models whose figures carry their name (Configuration.named_entries): several
    #: measured together; none for one entry
    named: tuple[str, ...] = ()


def profile(spec_path: str | Path, values: Mapping[str, object], *,
            server_overrides: Mapping[str, object] | None = None,
            config_path: Path | None = None, levels: Sequence[float] | None = None,
            load_client: LoadClient = "builtin") -> ProfileResult:
    """Measure the spec's model with ``values`` applied (field path -> value). Ctrl-C or
    SIGTERM: the server stops, the run ends KILLED and
    :class:`~tracker.lifecycle.Interrupted` is raised.
    ``config_path``: a config.pbtxt used instead of ``model.config`` as the base config;
    ``levels``: concurrencies (or rates) instead of the spec's; ``load_client``: "builtin" or
    "perf_analyzer"."""
    options = TuneOptions(server=dict(server_overrides or {}))
    session = Session.open(spec_path, options, work_prefix="profile-", base_config=config_path)
    with session.guarded():
        return _profile(session, values, levels, load_client)


def _profile(session: Session, values: Mapping[str, object], levels: Sequence[float] | None,
             load_client: LoadClient) -> ProfileResult:
    spec, conf = session.spec, session.configuration
    _config_values, load_values = model_config.split_params(values)
    refused = conf.file_knob_problems(values)
    if refused:  # before any run or server: the model has no such file or key
        raise ModelError("; ".join(f"{key}: {why}" for key, why in refused))
    cfgs = conf.apply(values)  # every model's config (<model>/<field path> for several)
    client = session.client
    placed = mlflow_run.place(client, spec.experiment_name, what="profile")
    run_id = placed.run_id
    if not run_id:
        exp = client.get_experiment_by_name(spec.experiment_name)
        exp_id = exp.experiment_id if exp else client.create_experiment(spec.experiment_name)
        run_id = client.create_run(exp_id, run_name=f"profile-{spec.model.label}",
                                   tags={runs.ROLE: "profile"}).info.run_id
    mlflow_run.settle(client, placed, run_id, study=spec.study_name)
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in values.items()],
                     tags=[RunTag(runs.ROLE, "profile")])  # also on `mlflow run`'s own run
    status = "FAILED"
    try:
        server = session.start_server()
        try:
            check = profile_check(session, server, values)
            done = measure(Bench(spec, conf, server, resolve_serving(spec, server, conf),
                                 load_client),
                           CandidateConfig(cfgs, json_knobs.file_values(values), values),
                           Procedure(levels=levels if levels is not None
                                     else load_levels_from(load_values), check=check),
                           session.workdir)
        except ConfigFailed as failed:
            raise failed.cause from failed.cause.__cause__
        finally:
            server.stop()
        runs.set_tags(client, run_id, {**machine_tags(server.gpu_set()), **done.tags})
        runs.log_metrics(client, run_id, {**done.headline(), **(check.metrics() if check
                                                                 else {})},
                         step=done.choice.concurrency, extra=done.sweep_metrics())
        runs.log_files(client, run_id, done.files())
        status = "FINISHED"
        return ProfileResult(run_id, done.measurements, done.choice, done.served_text,
                             done.by_model(), conf.named_entries)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except TrackerError as err:
        with contextlib.suppress(Exception):
            runs.set_tags(client, run_id, {runs.NOTE_TAG: str(err)})
        raise
    finally:
        with held(), contextlib.suppress(Exception):
            runs.finish_run(client, run_id, status)
