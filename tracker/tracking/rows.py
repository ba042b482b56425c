"""One trial as the report, the plots and promotion see it: :class:`TrialRow`, made from the
study's trial attributes, and :func:`entry_names`: what each
entry model's figures are called. Plain data, so the report (report.py) and the plots
(plots.py) both read it without importing each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracker.trial_attrs import TrialRecord, shown_params

if TYPE_CHECKING:
    import optuna

#: an entry model's figures that trials.csv, the report and the trade-off plot show, in
#: order: its throughput, its p99 latency and its load level (one of the two, by load kind)
ENTRY_FIGURES = ("perf_throughput", "perf_latency_p99", "concurrency", "request_rate")

#: entry model -> figure (an :data:`ENTRY_FIGURES` name) -> the metric the study logs it as
EntryNames = Mapping[str, Mapping[str, str]]
#: the study's user attribute holding its :func:`entry_names`, for what reads a study without
#: its configuration (``tracker promote``'s description)
ENTRY_NAMES_ATTR = "entry_names"


def entry_names(entries: Sequence[str],
                name: Callable[[str, str], str]) -> dict[str, dict[str, str]]:
    """Each entry model's :data:`ENTRY_FIGURES` as the study names them; ``name`` is the
    study's one naming rule, ``Configuration.metric_name`` (bare for one entry,
    ``<entry>/<metric>`` among several)."""
    return {entry: {figure: name(entry, figure) for figure in ENTRY_FIGURES}
            for entry in entries}


def recorded_entry_names(study: optuna.Study) -> EntryNames | None:
    """The :func:`entry_names` the study recorded (:data:`ENTRY_NAMES_ATTR`), or None for a
    study that recorded none (made by an older version)."""
    raw = study.user_attrs.get(ENTRY_NAMES_ATTR)
    if not isinstance(raw, dict):
        return None
    return {str(entry): {str(f): str(n) for f, n in names.items()}
            for entry, names in raw.items() if isinstance(names, dict)}


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
    the tuning loop writes, read through :class:`tracker.trial_attrs.TrialRecord`. A baseline
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


