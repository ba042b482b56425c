"""A configuration: the set of config.pbtxt files of every model a study serves.

A single model is the one-element case. A pipeline read from a Triton model repository holds
its entry model (an ensemble, a BLS model, any model) and every composing model: an
ensemble's steps from ``ensemble_scheduling`` (nested ensembles included), a BLS model's from
the list the spec gives (``model.composing``). Several independent entry models may share one
server (``entries``). Models are kept in load order: every model after the models it calls,
the entries last.

Knobs: in a configuration of several models a knob is ``<model>/<field path>``
(``preprocess/instance_group.count``); a single model keeps the bare path. Load knobs
(``concurrency``) are never prefixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tracker.errors import ConfigError, ModelError
from tracker.triton import model_config
from tracker.triton.formats import ModelSource, json_knobs, load_model_info
from tracker.triton.formats.base import CONFIG_FILE, pyfunc_problem
from tracker.triton.formats.ensemble import PLATFORM, steps_of
from tracker.triton.model_config import ModelConfig, ModelInfo

SEP = "/"


@dataclass(frozen=True)
class Configuration:
    """Every model of a study, in load order (composing models first, the entries last).

    ``entries``: the models the load drives (one for a model or a pipeline, several for
    independent models on one server); ``steps``: for each ensemble, the models its steps
    call, in step order; ``calls``: for each BLS model, the models the spec says it calls."""

    models: tuple[ModelInfo, ...]
    entries: tuple[str, ...]
    steps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    calls: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    repository: Path | None = None

    @classmethod
    def of(cls, info: ModelInfo) -> Configuration:
        """The one-model configuration."""
        return cls((info,), (str(info.config.name),))

    # ---- names ---------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Every model's name, in load order."""
        return tuple(str(m.config.name) for m in self.models)

    @property
    def single(self) -> bool:
        return len(self.models) == 1

    def metric_name(self, entry: str, metric: str) -> str:
        """How a study names an entry model's metric: bare for one entry (a model, a
        pipeline), ``<entry>/<metric>`` among several (``a/perf_throughput``)."""
        return metric if len(self.entries) == 1 else f"{entry}{SEP}{metric}"

    @property
    def named_entries(self) -> tuple[str, ...]:
        """The entry models whose figures carry their name (:meth:`metric_name`), each with
        its own load and weight: every entry among several, none for one entry."""
        return self.entries if len(self.entries) > 1 else ()

    @property
    def entry(self) -> str:
        """The (first) entry model: the one the load drives."""
        return self.entries[0]

    @property
    def entry_info(self) -> ModelInfo:
        return self.info(self.entry)

    def composing(self, entry: str | None = None) -> tuple[str, ...]:
        """The models ``entry`` (default: the first entry) reaches, in load order, itself
        left out."""
        root = entry or self.entry
        reach: set[str] = set()
        todo = [root]
        while todo:
            name = todo.pop()
            for child in (*self.steps.get(name, ()), *self.calls.get(name, ())):
                if child not in reach:
                    reach.add(child)
                    todo.append(child)
        return tuple(n for n in self.names if n in reach and n != root)

    def info(self, name: str) -> ModelInfo:
        for m in self.models:
            if m.config.name == name:
                return m
        raise ModelError(f"model {name!r} is not in the configuration (its models: "
                         f"{list(self.names)})")

    def key(self, model: str, path: str) -> str:
        """The knob name of ``path`` on ``model``: bare for a single model."""
        return path if path in model_config.LOAD_PARAMS else self.knob_prefix(model) + path

    def knob_prefix(self, model: str) -> str:
        """What ``model``'s knobs (and the messages about them) start with: ``<model>/``
        in a configuration of several models, nothing for a single model."""
        return "" if self.single else f"{model}{SEP}"

    # ---- what a single model does without (callers ask these, never how many) -----------
    @property
    def file_knob_models(self) -> tuple[ModelInfo, ...]:
        """The models whose JSON files ``FILE:KEY`` knobs may set: the model of a single-model
        configuration; none among several (a file knob names no model)."""
        return self.models if self.single else ()

    def file_knob_problems(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        """(knob, why) for each ``FILE:KEY`` knob among ``keys`` that the model cannot take
        (:func:`tracker.triton.formats.json_knobs.problems`); none among several models."""
        return [found for m in self.file_knob_models for found in json_knobs.problems(m, keys)]

    def file_knob_defaults(self, keys: Iterable[str]) -> dict[str, object]:
        """The value each ``FILE:KEY`` knob among ``keys`` has in the model's own file (what
        the default configuration runs with); none among several models. ModelError as
        :func:`tracker.triton.formats.json_knobs.defaults` says."""
        keys = list(keys)
        return {k: v for m in self.file_knob_models
                for k, v in json_knobs.defaults(m, keys).items()}

    @property
    def pairing_problem(self) -> str | None:
        """Why two copies of this configuration (the default and a candidate) cannot be served
        side by side in one server, or None when they can: a single model's copy is the model
        under another name; a pipeline of ensembles, or several entry models, is copied model
        by model, each copy's steps calling its own copies."""
        bls = sorted(self.calls)
        if bls:
            return (f"BLS model {bls[0]!r} names the models it calls in its own code, so a "
                    "copy of it would call the default's models, not its own copies")
        return None

    @property
    def pyfunc_problem(self) -> str | None:
        """Why ``mlflow.pyfunc`` cannot run a registered version of this configuration
        in-process (:func:`tracker.triton.formats.base.pyfunc_problem`), or None."""
        return pyfunc_problem(self.entry_info.config, len(self.models))

    @property
    def split_steps(self) -> tuple[str, ...]:
        """The composing models whose per-step split a report draws: the models the one entry
        of a pipeline reaches; none for a model without composing models, and none among
        several entry models (a step's figures are not split per entry)."""
        return self.composing() if len(self.entries) == 1 else ()

    # ---- knobs and configs ---------------------------------------------------------------
    def defaults(self) -> dict[str, ModelConfig]:
        """Every model's default config, in load order."""
        return {str(m.config.name): m.config for m in self.models}

    def split(self, values: Mapping[str, object]) -> dict[str, dict[str, object]]:
        """Config field values (load knobs already removed) per model; ConfigError for a
        bare key in a configuration of several models or a prefix naming no model."""
        out: dict[str, dict[str, object]] = {name: {} for name in self.names}
        for key, value in values.items():
            model, path = self.split_key(key)
            out[model][path] = value
        return out

    def split_key(self, key: str) -> tuple[str, str]:
        """(model, field path) of a knob name; ConfigError when it names no model."""
        if self.single:
            prefix, sep, rest = key.partition(SEP)
            if sep and prefix == self.entry:
                return self.entry, rest
            return self.entry, key
        prefix, sep, rest = key.partition(SEP)
        if not sep:
            raise ConfigError(f"`{key}`: a configuration of several models needs "
                              f"`<model>/{key}`, one of the models {list(self.names)}")
        if prefix not in self.names:
            raise ConfigError(f"`{key}`: no model {prefix!r} in the configuration (its "
                              f"models: {list(self.names)})")
        return prefix, rest

    def apply(self, values: Mapping[str, object]) -> dict[str, ModelConfig]:
        """Every model's config with its knobs of ``values`` set (load knobs left out), in
        load order; ConfigError as :func:`tracker.triton.model_config.apply` says, or when
        an ensemble's max_batch_size exceeds a step's."""
        config_values, _load = model_config.split_params(values)
        per_model = self.split(config_values)
        out = {name: (model_config.apply(self.info(name), per_model[name]) if per_model[name]
                      else self.info(name).config) for name in self.names}
        self.check(out)
        return out

    def check(self, configs: Mapping[str, ModelConfig]) -> None:
        """ConfigError for a combination Triton refuses: an ensemble batching more than one
        of its steps does."""
        for ensemble, steps in self.steps.items():
            mbs = configs[ensemble].max_batch_size
            for step in steps:
                if mbs > 0 and configs[step].max_batch_size < mbs:
                    raise ConfigError(
                        f"ensemble {ensemble!r} has max_batch_size {mbs}, which must be <= "
                        f"each step's, but step {step!r} got max_batch_size "
                        f"{configs[step].max_batch_size}")


# ---- reading a repository --------------------------------------------------------------------

def _model_folder(path: Path) -> bool:
    """A model folder: a config.pbtxt, or (a model Triton auto-completes) a version folder."""
    return path.is_dir() and ((path / CONFIG_FILE).is_file() or any(
        p.is_dir() and p.name.isdigit() for p in path.iterdir()))


def is_repository(path: Path) -> bool:
    """A Triton model repository: a folder of model folders (each with config.pbtxt, or
    version folders only), itself neither a model directory nor a model file."""
    if not path.is_dir() or (path / CONFIG_FILE).is_file():
        return False
    if any(p.is_dir() and p.name.isdigit() for p in path.iterdir()):
        return False
    return any(_model_folder(p) for p in path.iterdir())


def repository_models(root: Path) -> list[str]:
    """The model folders of a repository, sorted."""
    return sorted(p.name for p in root.iterdir() if _model_folder(p))


def load_configuration(path: Path, entries: str | Sequence[str], *,
                       composing: Iterable[str] = (),
                       base_config: Path | None = None) -> Configuration:
    """The configuration of ``entries`` (a model name, or several independent ones).

    ``path`` is a model file or directory (one entry: the one-model case, ``base_config``
    replacing its config.pbtxt) or a Triton model repository: each entry and every model it
    reaches (ensemble steps, nested ensembles, and ``composing``: the models a BLS entry
    calls) is read from its folder there, each by its own format. ModelError naming what the
    repository holds for an entry or a step that is not there, and for a cycle."""
    names = [entries] if isinstance(entries, str) else list(entries)
    if not names:
        raise ModelError("model.name needs at least one model name")
    path = Path(path)
    extra = list(composing)
    if not is_repository(path):
        if len(names) > 1 or extra:
            what = "several models" if len(names) > 1 else "model.composing"
            raise ModelError(f"{what} need model.path to be a Triton model repository (a "
                             f"folder of model folders, each with {CONFIG_FILE}), but "
                             f"{path} is not one")
        return Configuration.of(load_model_info(path, names[0], base_config))
    if base_config is not None:
        raise ModelError("model.config replaces one model's config.pbtxt; in a model "
                         f"repository ({path}) edit each model's own {CONFIG_FILE} instead")
    return _Reader(path).read(names, extra)


class _Reader:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.available = repository_models(root)
        self.infos: dict[str, ModelInfo] = {}
        self.steps: dict[str, tuple[str, ...]] = {}
        self.calls: dict[str, tuple[str, ...]] = {}
        self.order: list[str] = []

    def read(self, entries: list[str], composing: list[str]) -> Configuration:
        for name in [*composing, *entries]:
            self._missing(name, None)
        if composing:  # a BLS entry's callees (one entry: the spec's list belongs to it)
            self.calls[entries[0]] = tuple(dict.fromkeys(composing))
        for name in entries:
            self._visit(name, [])
        order = [n for n in self.order if n not in entries] + [
            n for n in self.order if n in entries]
        return Configuration(tuple(self.infos[n] for n in order), tuple(entries),
                             dict(self.steps), dict(self.calls), self.root)

    def _missing(self, name: str, caller: str | None) -> None:
        if name in self.available:
            return
        who = f"step {name!r} of ensemble {caller!r}" if caller else f"model {name!r}"
        raise ModelError(f"{who} is not in the model repository {self.root} (it holds: "
                         f"{', '.join(self.available) or 'no model'})")

    def _visit(self, name: str, stack: list[str]) -> None:
        if name in stack:
            cycle = " -> ".join([*stack[stack.index(name):], name])
            raise ModelError(f"the models call each other in a cycle: {cycle}")
        if name in self.infos:
            return
        info = load_model_info(self.root / name, name)
        children: list[str] = []
        if info.config.platform == PLATFORM:
            children = steps_of(info.config)
            self.steps[name] = tuple(children)
        children += [c for c in self.calls.get(name, ()) if c not in children]
        for child in children:
            self._missing(child, name if name in self.steps else None)
            self._visit(child, [*stack, name])
        self.infos[name] = info
        self.order.append(name)


class _ModelSection(ModelSource, Protocol):
    @property
    def names(self) -> list[str]: ...
    @property
    def composing(self) -> list[str]: ...


def configuration_of(model: _ModelSection) -> Configuration:
    """The configuration a spec's ``model`` section names."""
    return load_configuration(Path(model.path), model.names, composing=model.composing,
                              base_config=model.config)

