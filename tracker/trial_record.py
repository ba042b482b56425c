"""The study's own record of a trial: its Optuna user attributes and constraints, typed.

A bottom-layer module (imports nothing from the package). The tuning loop (tuning/trial.py,
tuning/loop.py) writes a trial's record only through the ``write_*`` functions here, and the
readers (the study report and ``tracker promote`` through :func:`trial_rows`, as
:class:`TrialRow`, the scale-out stale-trial callback, the progress line) read it only through
:meth:`TrialRecord.of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import optuna


class Attr:
    """Trial user-attribute names."""

    BASELINE = "baseline"            # True on the default configuration's trial
    CONSTRAINTS = "constraints"      # violations, spec order, <= 0 feasible
    FEASIBLE = "feasible"            # all constraints hold at the chosen concurrency
    CONCURRENCY = "concurrency"      # the chosen concurrency level
    METRICS = "metrics"              # old format: headline metrics as one nested dict
    METRIC_KEYS = "metric_keys"      # names of the headline metrics, each its own attribute
    MEASUREMENTS = "measurements"    # number of levels measured (0 for a duplicate)
    DUPLICATE_OF = "duplicate_of"    # number of the trial whose result was reused
    FAIL_REASON = "fail_reason"      # why a trial with a result failed
    INTERRUPTED = "interrupted"      # True when Ctrl-C / SIGTERM stopped the trial
    RUN_ID = "mlflow_run_id"         # the trial's MLflow child run
    EXACT_PARAMS = "exact_params"    # baseline values that the space cannot express
    WORKER = "worker"                # the worker (host:pid) that ran the trial
    WARM_START = "warm_start"        # an earlier study's configuration: "<run id>/trial-<n>"
    WARM_LEVEL = "warm_level"        # the concurrency that earlier trial was judged by


class _Stored(Protocol):
    """A trial as Optuna stores it (``FrozenTrial``; ``system_attrs`` read where it has them)
    or a running ``optuna.Trial``."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


class _Writable(Protocol):
    """A trial being run (``optuna.Trial``)."""

    def set_user_attr(self, key: str, value: Any) -> None: ...

    def set_constraint(self, name: str, value: float) -> None: ...


@dataclass(frozen=True)
class TrialRecord:
    """What the study knows about one trial, beyond its params and values."""

    baseline: bool = False
    exact_params: dict[str, Any] | None = None
    run_id: str | None = None
    worker: str | None = None
    duplicate_of: int | None = None
    fail_reason: str | None = None
    interrupted: bool = False
    constraints: list[float] | None = None
    feasible: bool | None = None
    concurrency: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    measurements: int = 0
    warm_start: str | None = None
    warm_level: int | None = None

    @classmethod
    def of(cls, trial: _Stored) -> TrialRecord:
        """The record of a stored trial. Feasibility falls back to the trial's stored
        constraints where the attribute is missing."""
        attrs = trial.user_attrs
        feasible = attrs.get(Attr.FEASIBLE)
        if feasible is None:
            stored = getattr(trial, "constraints", None) or (  # Optuna 5: set_constraint
                getattr(trial, "system_attrs", None) or {}).get("constraints")  # older
            if stored:
                values = stored.values() if isinstance(stored, Mapping) else stored
                feasible = all(v <= 0 for v in values)
        dup = attrs.get(Attr.DUPLICATE_OF)
        exact = attrs.get(Attr.EXACT_PARAMS)
        run_id, worker = attrs.get(Attr.RUN_ID), attrs.get(Attr.WORKER)
        cons = attrs.get(Attr.CONSTRAINTS)
        concurrency = attrs.get(Attr.CONCURRENCY)
        return cls(
            baseline=bool(attrs.get(Attr.BASELINE)),
            exact_params=dict(exact) if isinstance(exact, Mapping) else None,
            run_id=None if run_id is None else str(run_id),
            worker=None if worker is None else str(worker),
            duplicate_of=dup if isinstance(dup, int) else None,
            fail_reason=attrs.get(Attr.FAIL_REASON),
            interrupted=bool(attrs.get(Attr.INTERRUPTED)),
            constraints=None if cons is None else [float(v) for v in cons],
            feasible=None if feasible is None else bool(feasible),
            concurrency=concurrency,
            metrics=read_metrics(attrs),
            measurements=int(attrs.get(Attr.MEASUREMENTS, 0) or 0),
            warm_start=None if attrs.get(Attr.WARM_START) is None
            else str(attrs[Attr.WARM_START]),
            warm_level=_int_or_none(attrs.get(Attr.WARM_LEVEL)))

    @property
    def exact(self) -> bool:
        """A baseline whose params only approximate it (``exact_params`` set)."""
        return self.exact_params is not None


def write_started(trial: _Writable, run_id: str) -> None:
    trial.set_user_attr(Attr.RUN_ID, run_id)


def write_worker(trial: _Writable, worker_id: str) -> None:
    trial.set_user_attr(Attr.WORKER, worker_id)


def write_measured(trial: _Writable, violations: Mapping[str, float], *, feasible: bool,
                   concurrency: int, metrics: Mapping[str, float], measurements: int) -> None:
    """A measured trial: each constraint (Optuna's, for the sampler) and the chosen level.
    ``violations`` in spec order (feasibility.named_violations)."""
    for key, value in violations.items():
        trial.set_constraint(key, value)
    trial.set_user_attr(Attr.CONSTRAINTS, list(violations.values()))
    trial.set_user_attr(Attr.FEASIBLE, feasible)
    trial.set_user_attr(Attr.CONCURRENCY, concurrency)
    for key, attr in metric_attrs(dict(metrics)).items():
        trial.set_user_attr(key, attr)
    trial.set_user_attr(Attr.MEASUREMENTS, measurements)


def write_reused(trial: _Writable, number: int, source: _Stored,
                 constraints: Mapping[str, float]) -> None:
    """A trial that reuses trial ``number``'s result (``source``, with its constraints)."""
    for key, value in constraints.items():
        trial.set_constraint(key, value)
    for key in (Attr.CONSTRAINTS, Attr.FEASIBLE, Attr.CONCURRENCY):
        if key in source.user_attrs:
            trial.set_user_attr(key, source.user_attrs[key])
    for key, attr in metric_attrs(read_metrics(source.user_attrs)).items():
        trial.set_user_attr(key, attr)
    write_duplicate_of(trial, number)
    trial.set_user_attr(Attr.MEASUREMENTS, 0)


def write_duplicate_of(trial: _Writable, number: int) -> None:
    trial.set_user_attr(Attr.DUPLICATE_OF, number)


def write_failed(trial: _Writable, reason: str,
                 metrics: Mapping[str, float] | None = None) -> None:
    """A failed trial: why, and what it has anyway (the output check's figures)."""
    trial.set_user_attr(Attr.FAIL_REASON, reason[:2000])
    trial.set_user_attr(Attr.MEASUREMENTS, 0)
    for key, attr in metric_attrs(dict(metrics or {})).items():
        trial.set_user_attr(key, attr)


def write_abandoned(trial: _Writable, *, interrupted: bool, reason: str) -> None:
    """A trial cut short: interrupted (Ctrl-C / SIGTERM) or failed by an error."""
    if interrupted:
        trial.set_user_attr(Attr.INTERRUPTED, True)
    else:
        trial.set_user_attr(Attr.FAIL_REASON, reason)



# Each headline metric at the chosen level is a numeric user attribute of its own, named by the
# metric (``perf_throughput``, ``perf_latency_p99``, ...), so optuna-dashboard can show and
# plot it; ``metric_keys`` lists them. Studies of older versions kept one nested ``metrics``.
UNSET = "unset"  # a knob the default config leaves out, as params and reports show it


def metric_attrs(metrics: dict[str, float]) -> dict[str, object]:
    """The user attributes that record ``metrics`` (see :func:`read_metrics`)."""
    return {Attr.METRIC_KEYS: sorted(metrics), **metrics}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_metrics(attrs: dict[str, object]) -> dict[str, float]:
    """A trial's headline metrics from its user attributes (either format)."""
    keys = attrs.get(Attr.METRIC_KEYS)
    if isinstance(keys, list):
        return {str(k): float(v) for k in keys
                if isinstance(v := attrs.get(str(k)), int | float)}
    old = attrs.get(Attr.METRICS)
    return {str(k): float(v) for k, v in old.items()} if isinstance(old, dict) else {}


def shown_params(params: dict[str, object], exact: object) -> dict[str, object]:
    """The params as logged and reported: a baseline knob the space only approximates shows
    its real value, ``unset`` when the default config leaves it out (Optuna keeps the
    nearest value of the space, so the sampler can use the trial)."""
    if not isinstance(exact, dict) or not exact:
        return dict(params)
    return {k: ((UNSET if exact[k] is None else exact[k]) if k in exact else v)
            for k, v in params.items()}


@dataclass
class TrialRow:
    """One trial as the report sees it."""

    number: int
    state: str                                  # COMPLETE, FAIL, RUNNING, ...
    params: dict[str, object]
    values: list[float] | None = None           # objective values, spec order
    metrics: dict[str, float] = field(default_factory=dict)  # headline, chosen level
    feasible: bool | None = None
    baseline: bool = False
    duplicate_of: int | None = None
    concurrency: int | None = None
    measurements: int = 0                       # levels measured (0: duplicate/failed early)
    run_id: str | None = None
    fail_reason: str | None = None
    confirmed: tuple[float, float, float] | None = None  # median, 95% CI over confirmation
    confirmed_p99: float | None = None          # the confirmation's median p99 (ms)

    @property
    def name(self) -> str:
        return f"trial-{self.number}"

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE" and self.values is not None


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    """Every trial that ran (not the queued ones) as report rows, from the trial attributes
    the tuning loop writes, read through :class:`tracker.trial_record.TrialRecord`. A baseline
    knob the default config leaves out shows as ``unset`` (``shown_params``)."""
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue
        record = TrialRecord.of(t)
        rows.append(TrialRow(
            number=t.number, state=t.state.name,
            params=shown_params(dict(t.params), record.exact_params),
            values=list(t.values) if t.values is not None else None,
            metrics=record.metrics, feasible=record.feasible, baseline=record.baseline,
            duplicate_of=record.duplicate_of, concurrency=record.concurrency,
            measurements=record.measurements, run_id=record.run_id,
            fail_reason="interrupted" if record.interrupted else record.fail_reason))
    return rows


