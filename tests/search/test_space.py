"""The search space: sizes, grids and Optuna distributions from spec spaces, the default space
for batching and non-batching models, and knobs a model cannot take."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from tests.support import models
from tracker.errors import SpecError
from tracker.search.space import (
    check_space,
    default_space,
    distributions,
    grid,
    resolve_space,
    space_size,
    values,
)
from tracker.spec import Space, parse_spec
from tracker.triton.configuration import Configuration
from tracker.triton.formats.onnx import from_onnx
from tracker.triton.model_config import ModelInfo


def space_of(text_space: dict[str, object]) -> Space:
    """A space as the spec loads it (so ranges are Range models)."""
    spec = parse_spec({"model": {"name": "m", "path": "m.onnx"},
                       "search": {"space": text_space}})
    return spec.search.space


@pytest.fixture(scope="module")
def batching(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    path = models.dynamic_batch(tmp_path_factory.mktemp("m") / "dyn.onnx")
    return from_onnx(path, "dyn")


@pytest.fixture(scope="module")
def unbatched(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    path = models.fixed_batch(tmp_path_factory.mktemp("m") / "fixed.onnx")
    return from_onnx(path, "fixed")


@pytest.mark.parametrize(("knob", "expected"), [
    ([4, 1, 2], [4, 1, 2]),
    ({"low": 1, "high": 4}, [1, 2, 3, 4]),
    ({"low": 0, "high": 1000, "step": 250}, [0, 250, 500, 750, 1000]),
    ({"low": 1, "high": 64, "log": True}, [1, 2, 4, 8, 16, 32, 64]),
    ({"low": 1, "high": 100, "log": True}, [1, 2, 4, 8, 16, 32, 64]),
    ({"low": 3, "high": 24, "log": True}, [3, 6, 12, 24]),
    ({"low": 0.1, "high": 0.5, "step": 0.1}, [0.1, 0.2, 0.3, 0.4, 0.5]),
    ({"low": 0.0, "high": 1.0}, None),
    ({"low": 0.01, "high": 1.0, "log": True}, None),
])
def test_values_of_one_knob(knob: object, expected: list[object] | None) -> None:
    key = "parameters.x"  # takes any scalar, so every range shape is allowed
    assert values(space_of({key: knob})[key]) == expected


def test_space_size_and_grid() -> None:
    space = space_of({"instance_group.count": [1, 2, 3],
                      "max_batch_size": {"low": 1, "high": 16, "log": True},
                      "dynamic_batching.max_queue_delay_microseconds": {"low": 0, "high": 300,
                                                                        "step": 100}})
    assert space_size(space) == 3 * 5 * 4
    assert grid(space) == {"instance_group.count": [1, 2, 3],
                           "max_batch_size": [1, 2, 4, 8, 16],
                           "dynamic_batching.max_queue_delay_microseconds": [0, 100, 200, 300]}
    assert space_size({}) == 1 and grid({}) == {}


def test_continuous_range_has_no_size_and_no_grid() -> None:
    space = space_of({"instance_group.count": [1, 2], "parameters.x": {"low": 0.0, "high": 1.0}})
    assert space_size(space) is None
    with pytest.raises(SpecError, match=r"search.space.parameters.x: a continuous range has no "
                                        "grid"):
        grid(space)


def test_distributions_by_kind() -> None:
    dists = distributions(space_of({
        "instance_group.kind": ["KIND_CPU", "KIND_GPU"],
        "max_batch_size": {"low": 1, "high": 64, "log": True},
        "dynamic_batching.max_queue_delay_microseconds": {"low": 0, "high": 1000, "step": 100},
        "parameters.x": {"low": 0.5, "high": 2.0},
        "parameters.y": {"low": 0.0, "high": 1.0, "step": 0.25},
    }))
    assert dists["instance_group.kind"] == CategoricalDistribution(("KIND_CPU", "KIND_GPU"))
    assert dists["max_batch_size"] == IntDistribution(1, 64, log=True)
    assert dists["dynamic_batching.max_queue_delay_microseconds"] == IntDistribution(0, 1000,
                                                                                     step=100)
    assert dists["parameters.x"] == FloatDistribution(0.5, 2.0)
    assert dists["parameters.y"] == FloatDistribution(0.0, 1.0, step=0.25)


def test_optuna_samples_stay_inside_the_grid() -> None:
    space = space_of({"instance_group.count": [1, 2, 3],
                      "dynamic_batching.max_queue_delay_microseconds": {"low": 0, "high": 1000,
                                                                        "step": 250}})
    allowed = grid(space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask(fixed_distributions=distributions(space))
        for key, value in trial.params.items():
            assert value in allowed[key]
        seen.add(tuple(trial.params.values()))
        study.tell(trial, 0.0)
    assert len(seen) > 5
    combos = set()

    def objective(trial: optuna.Trial) -> float:
        params = {}
        for key, dist in distributions(space).items():
            if isinstance(dist, IntDistribution):
                params[key] = trial.suggest_int(key, dist.low, dist.high, step=dist.step)
            else:
                assert isinstance(dist, CategoricalDistribution)
                params[key] = trial.suggest_categorical(key, dist.choices)
        combos.add(tuple(params[k] for k in allowed))
        return 0.0

    grid_study = optuna.create_study(sampler=optuna.samplers.GridSampler(allowed, seed=0))
    grid_study.optimize(objective, n_trials=100)
    assert len(combos) == len(grid_study.trials) == space_size(space) == 15


def test_default_space_for_a_batching_model(batching: ModelInfo) -> None:
    assert batching.supports_batching
    space = default_space(batching)
    assert space == {"max_batch_size": [1, 2, 4, 8, 16, 32, 64],
                     "dynamic_batching.max_queue_delay_microseconds": [0, 100, 500, 1000],
                     "instance_group.count": [1, 2, 3]}
    assert space_size(space) == 84
    assert resolve_space({}, Configuration.of(batching)) == space
    mine = space_of({"instance_group.count": [1]})
    assert resolve_space(mine, Configuration.of(batching)) == mine
    # every default knob and value passes the spec's own rules
    assert space_of(dict(space)) == space


def test_default_space_for_an_unbatched_model(unbatched: ModelInfo) -> None:
    assert not unbatched.supports_batching
    space = default_space(unbatched)
    assert space == {"instance_group.count": [1, 2, 3, 4]}
    check_space(space, Configuration.of(unbatched))


def test_batching_knobs_are_refused_for_an_unbatched_model(unbatched: ModelInfo) -> None:
    space = space_of({"max_batch_size": [0, 8], "dynamic_batching.preferred_batch_size": [4],
                      "instance_group.count": [1, 2]})
    with pytest.raises(SpecError) as info:
        check_space(space, Configuration.of(unbatched), batch_size=2)
    assert [m.split(":")[0] for m in info.value.messages] == [
        "search.space.max_batch_size", "search.space.dynamic_batching.preferred_batch_size",
        "load.batch_size"]
    check_space(space_of({"max_batch_size": [0]}), Configuration.of(unbatched))


def test_batch_size_must_fit_max_batch_size(batching: ModelInfo) -> None:
    check_space(space_of({"max_batch_size": [1, 8]}), Configuration.of(batching),
                batch_size=8)
    with pytest.raises(SpecError, match=r"load.batch_size: must be <= max_batch_size \(8\), "
                                        "but got 16"):
        check_space(space_of({"max_batch_size": [1, 8]}), Configuration.of(batching),
                    batch_size=16)
    with pytest.raises(SpecError, match=r"max_batch_size \(4\)"):  # the model's default
        check_space(space_of({"instance_group.count": [1]}), Configuration.of(batching),
                    batch_size=5)


def test_the_sample_spaces_are_enumerable() -> None:
    repo = Path(__file__).resolve().parents[2]
    for path in sorted(repo.glob("projects/*/study*.yaml")):
        from tracker.spec import load_spec

        space = load_spec(path).search.space
        size = space_size(space)
        assert size is not None and size >= 1, path
        assert len(distributions(space)) == len(space)
