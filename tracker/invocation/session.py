"""What one invocation of ``tracker tune``, ``profile`` or ``confirm`` sets up, once.

:class:`Session` owns the spec (with the command line's overrides, validated again), the
model's info, the MLflow tracking URI and client, the study storage's URL, a work folder, the
Triton server (started on demand) and the signal handling. ``with session.guarded(...)`` is the
one place where Ctrl-C / SIGTERM become :class:`tracker.lifecycle.Interrupted` and where the
server is stopped and the work folder removed, whatever happens. :class:`StudyContext` adds
what a study needs on top (the Optuna study, its parent run, the search space, the
measurement's bench built once, the progress output): a trial, the conclusion and the
confirmation rounds read it.

Thread safety: a session belongs to the thread that opened it; signal handlers are installed
only from the main thread (elsewhere ``guarded`` only cleans up; tracker/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
import optuna
from mlflow import MlflowClient

from tracker.lifecycle import held, interruptible
from tracker.search.optuna_study import default_storage
from tracker.spec import StudySpec, ensure_model, load_spec, parse_spec
from tracker.tracking import patience
from tracker.triton.autocomplete import complete, to_complete
from tracker.triton.configuration import Configuration, configuration_of
from tracker.triton.model_config import ModelInfo
from tracker.triton.server.modes import make_server

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

    from tracker.candidate.measurement import Bench
    from tracker.invocation.progress import Progress
    from tracker.measure.types import LoadClient
    from tracker.tracking import runs
    from tracker.tracking.model_files import StoredModel
    from tracker.triton.server.base import TritonServer

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class TuneOptions:
    """Command-line overrides of the spec (None: the spec's value) and the invocation's own
    switches."""

    n_trials: int | None = None
    timeout_s: float | None = None
    study_name: str | None = None
    storage: str | None = None
    sampler: str | None = None
    seed: int | None = None
    patience: int | None = None
    server: dict[str, Any] = field(default_factory=dict)  # launch mode overrides
    bar: bool | None = None
    store_model: bool = True  # store the model file once and point each trial's run at it
    heartbeat_interval: int | None = None  # seconds; None: search/storage.py's default
    grace_period: int | None = None        # seconds; None: twice the interval
    load_client: LoadClient = "builtin"  # "builtin" or "perf_analyzer" (on PATH)


def apply_overrides(spec: StudySpec, options: TuneOptions) -> StudySpec:
    """The spec with the command line's values, validated again (so ``--mode remote``
    without a URL is the same error as in the file)."""
    search = {k: v for k, v in {"n_trials": options.n_trials, "timeout_s": options.timeout_s,
                                "study_name": options.study_name, "storage": options.storage,
                                "sampler": options.sampler, "seed": options.seed,
                                "patience": options.patience}.items() if v is not None}
    server = {k: v for k, v in options.server.items() if v is not None}
    if not search and not server:
        return spec
    data = spec.model_dump(mode="json", exclude_unset=True)
    data.setdefault("search", {}).update(search)
    data.setdefault("server", {}).update(server)
    return parse_spec(data, base_dir=spec.base_dir, source=spec.source)


def expand_env(url: str) -> str:
    """``${VAR}`` in a URL replaced from the environment (keeps a password out of command
    lines and MLflow params: ``postgresql://tuner:${PGPASSWORD}@db/optuna``)."""
    return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(0)), url)


def tracking_uri(spec: StudySpec) -> str:
    """Under ``mlflow run`` the run's own tracking URI; otherwise the spec's or the default."""
    if os.environ.get("MLFLOW_RUN_ID"):
        return str(mlflow.get_tracking_uri())
    return spec.mlflow.resolved_tracking_uri()


# ---- the session ---------------------------------------------------------------------------

def spec_configuration(spec: StudySpec) -> Configuration:
    """The configuration the spec's ``model`` section names; a model whose configuration
    only Triton's auto-complete gives (tracker/triton/autocomplete.py) gets the one Triton
    completed, read from a server of the spec's mode started once for it."""
    conf = configuration_of(spec.model)
    return complete(conf, make_server(spec.server)) if to_complete(conf) else conf


@dataclass
class Session:
    """One invocation's set-up: made by :meth:`open`, cleaned up by :meth:`guarded`."""

    spec: StudySpec
    configuration: Configuration  # every model served (one model: the one-element case)
    tracking_uri: str
    client: MlflowClient
    storage_url: str  # ${VAR} expanded; redact it before showing it
    workdir: Path
    server: TritonServer | None = None

    @property
    def info(self) -> ModelInfo:
        """The entry model (the one model of a one-model study)."""
        return self.configuration.entry_info

    @classmethod
    def open(cls, spec_path: str | Path, options: TuneOptions | None = None, *,
             work_prefix: str = "tracker-", base_config: Path | None = None) -> Session:
        """Load and check the spec (overrides applied), build the model if it has a build
        script, read its config (``base_config`` instead of the spec's ``model.config``), and
        resolve where MLflow and the study are stored. Starts nothing (but a server to read
        Triton's auto-complete, :func:`spec_configuration`): the server starts on
        :meth:`start_server`."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress lines say it
        spec = apply_overrides(load_spec(spec_path), options or TuneOptions())
        if base_config is not None:
            spec.model.config = Path(base_config).resolve()
        ensure_model(spec)
        configuration = spec_configuration(spec)
        uri = tracking_uri(spec)
        storage_url = expand_env(spec.search.storage or default_storage(uri))
        work = Path(".tracker") / "work"
        work.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=work_prefix, dir=work)).resolve()
        return cls(spec, configuration, uri, patience.client(uri), storage_url,
                   workdir)

    def start_server(self) -> TritonServer:
        """The spec's server (launch mode, strategy), started once per session."""
        if self.server is None:
            self.server = make_server(self.spec.server)
        return self.server

    @contextlib.contextmanager
    def guarded(self, interrupted: str = "") -> Iterator[None]:
        """The block runs with Ctrl-C / SIGTERM raising :class:`tracker.lifecycle.Interrupted`
        (message: the signal, then ``interrupted``). Afterwards, however the block ended, the
        server is stopped and the work folder removed, with signals held until that is done."""
        try:
            with interruptible(interrupted):
                yield
        finally:
            with held():
                self.close()

    def close(self) -> None:
        """Stop the server (if started) and remove the work folder; safe to call twice."""
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class StudyContext:
    """A session with a study open: what a trial, the conclusion and the confirmation need."""

    session: Session
    distributions: dict[str, BaseDistribution]
    study: optuna.Study
    parent: runs.StudyRun
    bench: Bench  # the server and what every trial and confirmation is measured with
    progress: Progress
    worker_tags: dict[str, str] = field(default_factory=dict)
    store_model: bool = True  # point each trial's run at the study's model file, stored once
    stored_model: StoredModel | None = None

    @property
    def spec(self) -> StudySpec:
        return self.session.spec

    @property
    def info(self) -> ModelInfo:
        return self.session.info

    @property
    def configuration(self) -> Configuration:
        return self.session.configuration

    @property
    def workdir(self) -> Path:
        return self.session.workdir
