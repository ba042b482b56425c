"""What each entry model's figures are called (:func:`entry_names`), for the report, the
plots and promotion, and as the study records them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

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
