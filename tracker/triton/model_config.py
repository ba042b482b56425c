"""config.pbtxt as a protobuf: read, write, change by field path.

The one representation is ``tritonclient.grpc.model_config_pb2.ModelConfig``; text goes in and
out through ``google.protobuf.text_format`` only. A model's default config comes from its
format (tracker/triton/formats/: ONNX, Python backend, config-driven), and `apply` sets
knobs named by their field path (`instance_group.count`, ...) with the checks Triton would make,
but before any server starts. docs/model-config.md explains the rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError
from tracker.metrics import LOAD_KNOBS
from tracker.spec.fields import file_knob, plain_path
from tracker.spec.limits import MAX_INSTANCE_COUNT
from tracker.spec.server_options import server_knob
from tracker.spec.yaml_loader import load_yaml
from tracker.triton import field_paths, sequence, warmup
from tracker.triton.onnx_reader import PLATFORM, rebatch_io

#: Spec/Optuna parameters that are not config.pbtxt fields (they shape the load instead).
LOAD_PARAMS = frozenset(LOAD_KNOBS)  # search-space keys that set the load (tracker/metrics.py)
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's default for auto-completed models

__all__ = [
    "LOAD_PARAMS", "ModelConfig", "ModelInfo", "apply", "check_path", "dumps", "load", "parse",
    "parse_assignment", "save", "split_params", "validate",
]

check_path = field_paths.check_path
_TOP_KEY = re.compile(r"^([A-Za-z_]\w*)\s*[:{ ]")


# ---- text <-> protobuf -----------------------------------------------------------------------

def parse(text: str) -> ModelConfig:
    """A ModelConfig from config.pbtxt text; ConfigError with the parser's line:column."""
    cfg = ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as exc:
        raise ConfigError(f"invalid config.pbtxt: {exc}") from exc
    return cfg


def load(path: str | Path) -> ModelConfig:
    """Read and parse a config.pbtxt file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    try:
        return parse(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def dumps(cfg: ModelConfig) -> str:
    """config.pbtxt text (protobuf text format, fields in field-number order).

    `max_batch_size: 0` is written out although it is proto3's default (which text format
    omits): it says "this model is not batched", as in Triton's own examples.
    """
    text = str(text_format.MessageToString(cfg))
    if cfg.max_batch_size != 0:
        return text
    fields = ModelConfig.DESCRIPTOR.fields_by_name
    after = fields["max_batch_size"].number
    lines = text.splitlines(keepends=True)
    at = len(lines)
    for i, line in enumerate(lines):
        key = _TOP_KEY.match(line)
        if key and key.group(1) in fields and fields[key.group(1)].number > after:
            at = i
            break
    lines.insert(at, "max_batch_size: 0\n")
    return "".join(lines)


def save(cfg: ModelConfig, path: str | Path) -> None:
    """Write `cfg` as config.pbtxt text to `path` (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(cfg))


def _copy(cfg: ModelConfig) -> ModelConfig:
    new = ModelConfig()
    new.CopyFrom(cfg)
    return new


# ---- the model and its default config ----------------------------------------------------------

@dataclass(frozen=True)
class ModelInfo:
    """A model ready to tune, as its format (tracker/triton/formats/) read it: its default
    config (as Triton's auto-complete would make it, merged with the user's base config) and
    whether Triton can batch it. ``model_file`` is what a trial carries and the registry
    stores: the ONNX file, or the whole model directory for directory formats.
    ``auto_complete``: the I/O comes from the model's own auto_complete_config, which only
    Triton runs; ``completed``: this config is the one Triton completed (both:
    tracker/triton/autocomplete.py), so its max_batch_size is the model's own."""

    config: ModelConfig
    supports_batching: bool
    model_file: Path
    platform: str = PLATFORM
    format: str = "onnx"
    auto_complete: bool = False
    completed: bool = False


# ---- changing a config by field path ------------------------------------------------------------

def split_params(values: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """(config field values, load values such as `concurrency`) from one parameter dict. Keys
    of a model directory's JSON files (``model.json:KEY``) are in neither: they are written
    into the trial's files (tracker/triton/formats/json_knobs.py ``file_values``), and server
    options (``server/cache_size``) are flags of the server (tracker/spec/server_options.py)."""
    config = {k: v for k, v in values.items()
              if k not in LOAD_PARAMS and file_knob(k) is None and not server_knob(k)}
    load_values = {k: v for k, v in values.items() if k in LOAD_PARAMS}
    return config, load_values


def apply(info_or_cfg: ModelInfo | ModelConfig, values: Mapping[str, object], *,
          supports_batching: bool | None = None) -> ModelConfig:
    """A new config with each field path in `values` set; the input is not changed.

    `supports_batching` defaults to the ModelInfo's. Raises ConfigError, naming the rule and
    the value, for unknown paths, wrong types and combinations Triton would refuse.
    """
    if isinstance(info_or_cfg, ModelInfo):
        base = info_or_cfg.config
        batching = (info_or_cfg.supports_batching if supports_batching is None
                    else supports_batching)
    else:
        if supports_batching is None:
            raise TypeError("apply(ModelConfig, ...) needs supports_batching=")
        base, batching = info_or_cfg, supports_batching
    cfg = _copy(base)
    for path, value in sequence.order_values(values):
        problem = sequence.scheduler_problem(base, path)
        if problem is not None:
            raise ConfigError(f"`{path}`: {problem}")
        if path in LOAD_PARAMS:
            raise ConfigError(f"`{path}` is a load setting, not a config.pbtxt field; "
                              "separate it first with split_params()")
        if file_knob(path) is not None:
            raise ConfigError(f"`{path}` is a key of a JSON file in the model directory, not a "
                              "config.pbtxt field; separate it first with split_params()")
        count = _as_int(value) if plain_path(path) == "instance_group.count" else None
        if count is not None and count < 1:
            raise ConfigError(f"`{path}` must be >= 1, but got {value}")
        field_paths.set_value(cfg, path, value)
    mbs = cfg.max_batch_size
    if mbs > 0 and not batching:
        raise ConfigError(f"max_batch_size must be 0 for model {cfg.name!r}: it does not "
                          "support batching (an input or output has a fixed first dimension), "
                          f"but got max_batch_size={mbs}")
    knobs = sorted(p for p in values if p.startswith("dynamic_batching."))
    if mbs == 0 and knobs:
        raise ConfigError(f"dynamic batching needs max_batch_size > 0, but got max_batch_size=0 "
                          f"with {', '.join(f'{k}={values[k]!r}' for k in knobs)}")
    if (mbs == 0) != (base.max_batch_size == 0):  # batching switched off or on: fix the dims
        try:
            rebatch_io(cfg, batched=mbs > 0)
        except ValueError as exc:
            raise ConfigError(f"max_batch_size={mbs} needs every input and output to have a "
                              f"variable first dimension, but {exc}") from exc
    if mbs == 0 and "max_batch_size" in values and cfg.HasField("dynamic_batching"):
        cfg.ClearField("dynamic_batching")  # an unbatched model gets no dynamic batcher
    db = cfg.dynamic_batching
    if "dynamic_batching.priority_levels" in values and db.priority_levels > 0 \
            and db.default_priority_level == 0:  # Triton needs one: the lowest level
        db.default_priority_level = db.priority_levels
    if warmup.touched(values):  # a model_warmup knob: a complete block, or none (warmup.py)
        warmup.complete(cfg, values)
    validate(cfg, supports_batching=batching)
    return cfg


def _as_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def validate(cfg: ModelConfig, *, supports_batching: bool) -> None:
    """Raise ConfigError for a config Triton would refuse (checked before any server starts)."""
    if not cfg.name:
        raise ConfigError("config `name` must be set, but it is empty")
    mbs = cfg.max_batch_size
    if mbs < 0:
        raise ConfigError(f"max_batch_size must be >= 0, but got {mbs}")
    if mbs > 0 and not supports_batching:
        raise ConfigError(f"max_batch_size must be 0 for a model that does not support "
                          f"batching, but got max_batch_size={mbs}")
    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if mbs == 0 and db != model_config_pb2.ModelDynamicBatching():
            raise ConfigError("dynamic batching settings need max_batch_size > 0, but got "
                              "max_batch_size=0 with dynamic_batching { "
                              f"{text_format.MessageToString(db, as_one_line=True)} }}")
        for size in db.preferred_batch_size:
            if size < 1 or (mbs > 0 and size > mbs):
                raise ConfigError("each dynamic_batching.preferred_batch_size must be in "
                                  f"[1, max_batch_size={mbs}], but got "
                                  f"{list(db.preferred_batch_size)}")
    for i, group in enumerate(cfg.instance_group):
        if group.count < 0:
            raise ConfigError(f"instance_group[{i}].count must be >= 1, but got {group.count}")
        if group.count > MAX_INSTANCE_COUNT:
            raise ConfigError(f"instance_group[{i}].count must be <= {MAX_INSTANCE_COUNT} "
                              f"(instances in one group), but got {group.count}")
    for kind in ("input", "output"):
        names: set[str] = set()
        for tensor in getattr(cfg, kind):
            _check_tensor(kind, tensor, names)


def _check_tensor(kind: str, tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput,
                  names: set[str]) -> None:
    if not tensor.name:
        raise ConfigError(f"every {kind} needs a name, but one has none")
    if tensor.name in names:
        raise ConfigError(f"{kind} names must be unique, but {tensor.name!r} appears twice")
    names.add(tensor.name)
    if tensor.data_type == model_config_pb2.TYPE_INVALID:
        raise ConfigError(f"{kind} {tensor.name!r} needs a data_type, but has none")
    if any(d == 0 or d < -1 for d in tensor.dims):
        raise ConfigError(f"{kind} {tensor.name!r} dims must be > 0 or -1 (variable), but got "
                          f"{list(tensor.dims)}")


# ---- `PATH=VALUE` from the command line ----------------------------------------------------------

def parse_assignment(text: str) -> tuple[str, object]:
    """`PATH=VALUE` -> (path, value); VALUE becomes int/float/bool/list when it looks like one."""
    path, sep, raw = text.partition("=")
    path, raw = path.strip(), raw.strip()
    if not sep or not path:
        raise ConfigError(f"expected PATH=VALUE (e.g. instance_group.count=2), but got {text!r}")
    return path, _parse_value(raw)


def _parse_value(raw: str) -> object:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return json.loads(raw)
    except ValueError:
        pass
    if raw.startswith("["):
        try:
            value = load_yaml(raw)  # safe, aliases bounded (tracker/spec/yaml_loader.py)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read list value {raw!r}: {exc}") from exc
        return value
    return raw
