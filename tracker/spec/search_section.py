"""The ``search`` section of the study spec: the Optuna sampler, the trial budget, the study's
name and storage, the search space (knob -> a list of choices, one pinned value or a range),
each knob and value checked against the config field it names, and the earlier study a new
one starts from (``warm_start``: docs/retune.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from tracker.samplers import NAMES as SAMPLER_NAMES
from tracker.samplers import SAMPLERS
from tracker.spec.fields import config_field
from tracker.spec.messages import Problems, join_path, problem, show
from tracker.spec.model_section import SpecModel
from tracker.spec.server_options import server_field, server_knob
from tracker.spec.shapes import PosFloat, PosInt, Range, Scalar, as_list, list_or_range
from tracker.spec.space_rules import (
    check_knob,
    check_space_value_shape,
    knob_path,
    knob_value_problems,
)

if TYPE_CHECKING:
    SamplerName: TypeAlias = str
else:  # the registered samplers (tracker/samplers.py)
    SamplerName = Literal[SAMPLER_NAMES]


SpaceValue = Annotated[
    Union[  # noqa: UP007
        Annotated[list[Scalar], Field(min_length=1), BeforeValidator(check_space_value_shape),
                  Tag("@list")],
        Annotated[Range, Tag("@range")],
    ],
    Discriminator(list_or_range),
    BeforeValidator(as_list),
]
SpaceKey = Annotated[str, AfterValidator(check_knob)]
Space: TypeAlias = dict[str, list[Scalar] | Range]

#: ``search.warm_start: auto``: the latest finished study of the same model and knobs
WARM_AUTO = "auto"


class WarmStart(SpecModel):
    """The earlier study a study starts from (docs/retune.md)."""

    source: Annotated[str, Field(min_length=1, alias="from")]
    """auto, a study name, an MLflow experiment, a study's run id, or a registered model."""
    force: bool = False
    """Start from it although it is another model, backend or inputs."""


def _warm_start(value: object) -> object:
    """``warm_start: X`` is ``warm_start: {from: X}``."""
    return {"from": value} if isinstance(value, str) else value


class SearchSection(SpecModel):
    """How configurations are chosen: the Optuna sampler, the budget and the search space."""

    sampler: SamplerName = "tpe"
    """The Optuna sampler (grid: every configuration, needs a finite space)."""
    n_trials: PosInt = 20
    """Distinct configurations the study should measure (a repeated proposal does not count)."""
    timeout_s: PosFloat | None = None
    """Stop starting new trials after this many seconds."""
    seed: Annotated[int, Field(ge=0)] | None = None
    """Sampler seed, for a repeatable sequence of trials."""
    patience: PosInt | None = None
    """Stop after this many trials without improvement."""
    study_name: Annotated[str, Field(min_length=1)] | None = None
    """The Optuna study name (default: the model name); name and storage resume a study."""
    storage: str | None = None
    """An Optuna storage URL (default: optuna.db beside the MLflow sqlite database)."""
    space: dict[SpaceKey, SpaceValue] = Field(default_factory=dict)
    """Knob -> a list of choices, one pinned value or a range (default: from the model)."""
    sweep: Literal["guided", "full"] = "guided"  # guided: tracker/search/sweep_plan.py
    """guided: start each sweep at the best trial's level; full: every level from the lowest."""
    warm_start: Annotated[WarmStart, BeforeValidator(_warm_start)] | None = None
    """Start from an earlier study: auto, a study, experiment, run id or registered model."""

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value:
            raise problem("must be a database URL such as 'sqlite:///optuna.db' or "
                          f"'postgresql://user@host/db', but got {show(value)}")
        return value

    @model_validator(mode="after")
    def _space(self) -> SearchSection:
        items: list[tuple[str, str]] = []
        for key, value in self.space.items():
            path = knob_path(key)
            field = server_field(key) if server_knob(key) else config_field(path)
            found = knob_value_problems(path, field, value)
            items.extend((join_path(f"space.{key}", sub), msg) for sub, msg in found)
        if SAMPLERS[self.sampler].finite_space:
            for key, value in self.space.items():
                if isinstance(value, Range) and not value.is_int and value.step is None:
                    items.append(("sampler", f"{self.sampler!r} needs a finite space, but "
                                             f"search.space."
                                             f"{key} is a continuous range; give it a `step` "
                                             "or list its values"))
        if items:
            raise Problems(items)
        return self

    def resolved_storage(self, tracking_uri: str | None = None) -> str:
        """``storage``; when it is not set, ``optuna.db`` beside the MLflow sqlite database
        (``tracking_uri``) or else in the current working directory, as an absolute URL."""
        if self.storage:
            return self.storage
        prefix, cwd = "sqlite:///", Path.cwd()
        if tracking_uri and tracking_uri.startswith(prefix) and ":memory:" not in tracking_uri:
            db = Path(tracking_uri[len(prefix):])
            return prefix + str((db if db.is_absolute() else cwd / db).parent / "optuna.db")
        return prefix + str(cwd / "optuna.db")
