"""The Optuna samplers a study may use (``search.sampler``): one entry per sampler.

The spec's ``search.sampler`` choices, the CLI's ``--sampler`` choices, the docs' table
(docs/tuning.md; tests/project checks it names each) and the sampler the search builds
(tracker.search.optuna_study.make_sampler, one builder per name) all read this table. Adding a
sampler: one line here and its builder in tracker/search/optuna_study.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplerChoice:
    """One `search.sampler` choice: its name, what it does, what space it needs."""

    name: str
    text: str                       # what it does, in words (docs, `tracker check`)
    finite_space: bool = False      # it needs every knob to have a finite list of values


SAMPLERS: dict[str, SamplerChoice] = {s.name: s for s in (
    SamplerChoice("tpe", "multivariate TPE after one random start-up trial (the default)"),
    SamplerChoice("random", "independent uniform draws"),
    SamplerChoice("grid", "every configuration of the space, the default's first",
                  finite_space=True),
    SamplerChoice("nsga2", "NSGA-II, for two objectives (constrained domination)"),
)}
NAMES: tuple[str, ...] = tuple(SAMPLERS)
