"""Earlier studies in MLflow, read back for a new study's warm start (``search.warm_start``).

A study is its parent run (``tracker.role = study``) and its trial runs. :func:`find_study`
resolves what ``search.warm_start`` names: ``auto`` (the latest finished study of the same
model whose trials searched the same knobs), a study's parent or trial run id, a study name,
an MLflow experiment (its latest finished study) or a registered model (the study its
Production version was registered from). :class:`EarlierStudy` holds what a warm start needs:
the trials that were measured (never duplicates, failures or interrupted ones), the
confirmation's verdict and roles, the machine it ran on and its model's signature. The
figures are the earlier study's: the warm start only uses them to order what to measure again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.entities import Run

from tracker import tags
from tracker.errors import TrackingError
from tracker.tracking.registry import PRODUCTION, PRODUCTION_ALIAS, version_for_alias
from tracker.tracking.runs import mlflow_call

AUTO = "auto"
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
_MAX_STUDIES = 200  # parent runs `auto` looks through, newest first
#: the parent-run tags that say what a study ran on (compared by a warm start)
MACHINE_KEYS = (tags.HOST_CPU, tags.HOST_CPU_CORES, tags.GPU_NAMES, tags.TRITON_VERSION,
                tags.LAUNCH_MODE)


@dataclass(frozen=True)
class EarlierTrial:
    """One measured trial of an earlier study, as its run logged it (params as strings)."""

    number: int
    run_id: str
    params: dict[str, str]
    metrics: dict[str, float]
    feasible: bool
    baseline: bool
    concurrency: int | None = None
    confirm_role: str | None = None   # chosen | winner | tied | worse | default
    confirm_rank: int | None = None


@dataclass(frozen=True)
class EarlierStudy:
    """An earlier study: its parent run and what its trials measured."""

    run_id: str
    experiment_id: str
    name: str
    model: str
    objectives: dict[str, str]
    trials: list[EarlierTrial]
    verdict: str | None = None
    machine: dict[str, str] = field(default_factory=dict)
    signature: dict[str, object] | None = None
    gpu_devices: dict[str, str] = field(default_factory=dict)

    @property
    def knobs(self) -> frozenset[str]:
        """The knobs its trials searched (every trial logs the same ones)."""
        return frozenset(k for t in self.trials for k in t.params)

    @property
    def label(self) -> str:
        return f"study {self.name!r} (run {self.run_id})"


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _trial(run: Run) -> EarlierTrial | None:
    """A trial run that measured (or reused nothing: duplicates repeat another trial)."""
    t = run.data.tags
    number = _int(t.get(tags.TRIAL))
    if (t.get(tags.ROLE) != "trial" or number is None or t.get(tags.STATE) != "COMPLETE"
            or t.get(tags.DUPLICATE_OF) or run.info.status != "FINISHED"):
        return None
    return EarlierTrial(number, run.info.run_id, dict(run.data.params), dict(run.data.metrics),
                        t.get(tags.FEASIBLE) == "true", t.get(tags.BASELINE) == "true",
                        _int(t.get(tags.CONCURRENCY)), t.get(tags.CONFIRM_ROLE),
                        _int(t.get(tags.CONFIRM_RANK)))


def _objectives(text: str | None) -> dict[str, str]:
    """``study.objectives`` as the parent logged it (a dict's repr, or JSON)."""
    if not text:
        return {}
    try:
        found = json.loads(text.replace("'", '"'))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def read_study(client: MlflowClient, parent: Run) -> EarlierStudy:
    """The study of parent run ``parent``, with its measured trials by number."""
    info, data = parent.info, parent.data
    found = mlflow_call("read an earlier study's trials", client.search_runs,
                        [info.experiment_id],
                        filter_string=f"tags.`{tags.PARENT}` = '{info.run_id}'",
                        max_results=10000)
    trials = sorted((t for t in map(_trial, found) if t is not None), key=lambda t: t.number)
    signature = None
    if data.tags.get(tags.MODEL_SIGNATURE):
        try:
            signature = json.loads(data.tags[tags.MODEL_SIGNATURE])
        except ValueError:
            signature = None
    return EarlierStudy(
        run_id=info.run_id, experiment_id=info.experiment_id,
        name=data.tags.get(tags.STUDY, info.run_name or info.run_id),
        model=data.params.get("study.model", ""),
        objectives=_objectives(data.params.get("study.objectives")), trials=trials,
        verdict=data.tags.get(tags.VERDICT),
        machine={k: data.tags[k] for k in MACHINE_KEYS if data.tags.get(k)}
        | ({tags.LAUNCH_MODE: data.params["study.server_mode"]}
           if tags.LAUNCH_MODE not in data.tags and data.params.get("study.server_mode")
           else {}),
        signature=signature if isinstance(signature, dict) else None,
        gpu_devices={k: v for k, v in data.tags.items() if k.startswith(tags.GPU_DEVICE)})


def _studies(client: MlflowClient, experiment_ids: list[str], extra: str = "",
             finished: bool = True) -> list[Run]:
    """Study parent runs, finished ones only unless ``finished`` is False (never one a
    resumed study superseded), newest first."""
    if not experiment_ids:
        return []
    query = f"tags.`{tags.ROLE}` = 'study'" + (
        " and attributes.status = 'FINISHED'" if finished else "") + extra
    found = mlflow_call("search earlier studies", client.search_runs, experiment_ids,
                        filter_string=query, order_by=["attributes.start_time DESC"],
                        max_results=_MAX_STUDIES)
    return [r for r in found if not r.data.tags.get(tags.SUPERSEDED_BY)]


def _all_experiments(client: MlflowClient) -> list[str]:
    found = mlflow_call("list the experiments", client.search_experiments, max_results=1000)
    return [e.experiment_id for e in found]


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


@dataclass(frozen=True)
class Current:
    """The study that starts: its model, knobs, study name and storage (never itself)."""

    model: str
    knobs: frozenset[str]
    study_name: str
    storage: str


def _is_current(run: Run, current: Current) -> bool:
    return (run.data.tags.get(tags.STUDY) == current.study_name
            and run.data.tags.get(tags.STORAGE) == current.storage)


def find_auto(client: MlflowClient, current: Current) -> EarlierStudy | None:
    """The latest finished study of the same model whose trials searched the same knobs."""
    runs = _studies(client, _all_experiments(client),
                    f" and params.`study.model` = '{_quote(current.model)}'")
    for run in runs:
        if _is_current(run, current):
            continue
        study = read_study(client, run)
        if study.trials and study.knobs == current.knobs:
            return study
    return None


def _study_of_run(client: MlflowClient, run: Run) -> Run | None:
    """The parent run of a study: ``run`` itself, or the study a trial run belongs to."""
    role = run.data.tags.get(tags.ROLE)
    if role == "study":
        return run
    parent = run.data.tags.get(tags.PARENT)
    if role == "trial" and parent:
        return mlflow_call("read a study run", client.get_run, parent)
    return None


def _by_run_id(client: MlflowClient, ref: str) -> Run | None:
    if not _RUN_ID.match(ref):
        return None
    try:
        run = client.get_run(ref)
    except Exception:  # not a run id of this server: try the other kinds of reference
        return None
    return _study_of_run(client, run)


def _by_registered_model(client: MlflowClient, ref: str) -> Run | None:
    """The study the registered model ``ref``'s Production version was registered from."""
    try:
        versions = client.search_model_versions(f"name = '{_quote(ref)}'")
    except Exception:  # not a registered model (or no registry on this server)
        return None
    version = next((v for v in versions if v.current_stage == PRODUCTION), None)
    if version is None and versions:
        version = version_for_alias(client, ref, PRODUCTION_ALIAS)
    if version is None:
        if versions:
            raise TrackingError(f"search.warm_start: registered model {ref!r} has no version in "
                                f"{PRODUCTION} (stage or alias {PRODUCTION_ALIAS!r}) to start "
                                "from")
        return None
    run_id = (version.tags or {}).get(tags.MODEL_RUN_ID) or version.run_id
    return _by_run_id(client, str(run_id)) if run_id else None


def find_study(client: MlflowClient, ref: str, current: Current) -> EarlierStudy | None:
    """The earlier study ``ref`` names (see the module docstring); None for ``auto`` when
    none fits. TrackingError when ``ref`` names nothing this tracking server holds."""
    if ref == AUTO:
        return find_auto(client, current)
    run = _by_run_id(client, ref)
    if run is None:
        named = [r for r in _studies(client, _all_experiments(client),
                                     f" and tags.`{tags.STUDY}` = '{_quote(ref)}'", False)
                 if not _is_current(r, current)]
        run = next((r for r in named if r.info.status == "FINISHED"),
                   named[0] if named else None)
    if run is None:
        experiment = mlflow_call("read an experiment", client.get_experiment_by_name, ref)
        if experiment is not None:
            found = _studies(client, [experiment.experiment_id])
            run = next((r for r in found if not _is_current(r, current)), None)
            if run is None:
                raise TrackingError(f"search.warm_start: experiment {ref!r} holds no finished "
                                    "study to start from")
    if run is None:
        run = _by_registered_model(client, ref)
    if run is None:
        raise TrackingError(f"search.warm_start: no study, experiment, run or registered model "
                            f"named {ref!r} in this tracking server")
    if run.info.status != "FINISHED":
        raise TrackingError(f"search.warm_start: the study of run {run.info.run_id} is "
                            f"{run.info.status}, not FINISHED; start from a finished study")
    return read_study(client, run)


def describe(trials: Iterable[EarlierTrial]) -> str:
    """``trial-3, trial-7``: trials by their run names."""
    return ", ".join(f"trial-{t.number}" for t in trials)
