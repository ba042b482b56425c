"""config.pbtxt as a protobuf: read, write, derive from an ONNX model, change by field path.

The one representation is ``tritonclient.grpc.model_config_pb2.ModelConfig``; text goes in and
out through ``google.protobuf.text_format`` only. The default config of an ONNX model is made
the way Triton's ONNX Runtime backend auto-completes one (see onnx_reader.py), and `apply` sets
knobs named by their field path (`instance_group.count`, ...) with the checks Triton would make,
but before any server starts. docs/model-config.md explains the rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError, ModelError
from tracker.metrics import LOAD_KNOBS
from tracker.triton import field_paths
from tracker.triton.onnx_reader import (
    BACKEND,
    PLATFORM,
    OnnxModel,
    default_config,
    read_onnx,
    rebatch_io,
)

if TYPE_CHECKING:
    from tracker.spec import ModelSection

#: Spec/Optuna parameters that are not config.pbtxt fields (they shape the load instead).
LOAD_PARAMS = frozenset(LOAD_KNOBS)  # search-space keys that set the load (tracker/metrics.py)
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's default for auto-completed models

__all__ = [
    "LOAD_PARAMS", "ModelConfig", "ModelInfo", "apply", "check_path", "dumps", "from_onnx",
    "load", "load_model_info", "model_info", "parse", "parse_assignment", "save",
    "split_params", "validate",
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
    """A model ready to tune: its default config (as Triton's auto-complete would make it,
    merged with the user's base config) and whether Triton can batch it."""

    config: ModelConfig
    supports_batching: bool
    model_file: Path
    platform: str = PLATFORM


class _ModelLike(Protocol):
    name: str
    path: Path
    config: Path | None


def from_onnx(path: str | Path, name: str) -> ModelInfo:
    """The default config of the ONNX model at `path`, served under `name`."""
    model = read_onnx(Path(path))
    cfg = default_config(model, name, batching=model.can_batch,
                         max_batch_size=DEFAULT_MAX_BATCH_SIZE)
    return ModelInfo(cfg, model.can_batch, Path(path))


def model_info(model: ModelSection | _ModelLike) -> ModelInfo:
    """ModelInfo for a spec's `model` section: an ONNX file or a Triton model directory, with
    `model.config` (when given) as the base config."""
    return load_model_info(Path(model.path), model.name, model.config)


def load_model_info(path: Path, name: str, base_config: Path | None = None) -> ModelInfo:
    """ModelInfo for an `.onnx` file or a model directory (`config.pbtxt`, `<version>/model.onnx`).

    The base config is `base_config` when given, else the directory's config.pbtxt when there is
    one; its fields win, and what it leaves out is completed from the ONNX model.
    """
    base: ModelConfig | None = load(base_config) if base_config is not None else None
    if path.is_dir():
        dir_cfg = path / "config.pbtxt"
        if base is None and dir_cfg.is_file():
            base = load(dir_cfg)
        filename = base.default_model_filename if base and base.default_model_filename else ""
        model_file = _model_file(path, filename or "model.onnx")
    elif path.is_file() or path.suffix == ".onnx":
        model_file = path
    else:
        raise ModelError(f"model path {path} does not exist (expected an .onnx file or a "
                         "Triton model directory)")
    model = read_onnx(model_file)
    if base is None:
        cfg = default_config(model, name, batching=model.can_batch,
                             max_batch_size=DEFAULT_MAX_BATCH_SIZE)
        return ModelInfo(cfg, model.can_batch, model_file)
    cfg = _complete(base, model, name)
    return ModelInfo(cfg, cfg.max_batch_size > 0, model_file)


def _model_file(model_dir: Path, filename: str) -> Path:
    versions = sorted((int(p.name) for p in model_dir.iterdir()
                       if p.is_dir() and p.name.isdigit()), reverse=True)
    for version in versions:
        candidate = model_dir / str(version) / filename
        if candidate.is_file():
            return candidate
    raise ModelError(f"model directory {model_dir} has no <version>/{filename} "
                     f"(versions found: {versions or 'none'})")


def _complete(base: ModelConfig, model: OnnxModel, name: str) -> ModelConfig:
    """Auto-complete `base` from the ONNX model, as Triton does: given fields win."""
    cfg = _copy(base)
    cfg.name = name
    if cfg.platform and cfg.platform != PLATFORM:
        raise ConfigError(f"base config platform must be {PLATFORM!r} for an ONNX model, "
                          f"but got {cfg.platform!r}")
    if cfg.backend and cfg.backend != BACKEND:
        raise ConfigError(f"base config backend must be {BACKEND!r} for an ONNX model, "
                          f"but got {cfg.backend!r}")
    cfg.platform, cfg.backend = PLATFORM, BACKEND
    if cfg.max_batch_size < 0:
        raise ConfigError(f"max_batch_size must be >= 0, but got {cfg.max_batch_size}")
    if cfg.max_batch_size > 0 and not model.can_batch:
        raise ConfigError(f"base config sets max_batch_size={cfg.max_batch_size}, but model "
                          f"{model.path.name} does not support batching (some input or output "
                          "has a fixed first dimension); use max_batch_size 0")
    batching = cfg.max_batch_size > 0
    if cfg.max_batch_size == 0 and model.can_batch and not _full_rank_io(cfg, model):
        batching = True
        cfg.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        has_scheduler = cfg.WhichOneof("scheduling_choice") is not None
        if not has_scheduler:
            cfg.dynamic_batching.SetInParent()
    derived = default_config(model, name, batching=batching,
                             max_batch_size=cfg.max_batch_size)
    for kind in ("input", "output"):
        _complete_io(kind, cfg, derived, model)
    return cfg


def _full_rank_io(cfg: ModelConfig, model: OnnxModel) -> bool:
    """True when the base config lists inputs with the batch dim included (batching off)."""
    ranks = {t.name: len(t.shape) for t in model.inputs}
    given = [t for t in cfg.input if t.dims and t.name in ranks]
    return bool(given) and all(len(t.dims) == ranks[t.name] for t in given)


def _complete_io(kind: str, cfg: ModelConfig, derived: ModelConfig, model: OnnxModel) -> None:
    given = getattr(cfg, kind)
    by_name = {t.name: t for t in getattr(derived, kind)}
    seen = set()
    for tensor in given:
        ref = by_name.get(tensor.name)
        if ref is None:
            raise ConfigError(f"base config {kind} {tensor.name!r} is not an {kind} of "
                              f"{model.path.name} (its {kind}s: {sorted(by_name)})")
        seen.add(tensor.name)
        if tensor.data_type == model_config_pb2.TYPE_INVALID:
            tensor.data_type = ref.data_type
        elif tensor.data_type != ref.data_type:
            want = model_config_pb2.DataType.Name(ref.data_type)
            got = model_config_pb2.DataType.Name(tensor.data_type)
            raise ConfigError(f"base config {kind} {tensor.name!r} must have data_type {want} "
                              f"(the model's), but got {got}")
        if not tensor.dims:
            tensor.dims.extend(ref.dims)
            if ref.HasField("reshape") and not tensor.HasField("reshape"):
                tensor.reshape.CopyFrom(ref.reshape)
    for name, ref in by_name.items():
        if name not in seen:
            given.add().CopyFrom(ref)


# ---- changing a config by field path ------------------------------------------------------------

def split_params(values: Mapping[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """(config field values, load values such as `concurrency`) from one parameter dict."""
    config = {k: v for k, v in values.items() if k not in LOAD_PARAMS}
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
    for path, value in values.items():
        if path in LOAD_PARAMS:
            raise ConfigError(f"`{path}` is a load setting, not a config.pbtxt field; "
                              "separate it first with split_params()")
        count = _as_int(value) if path == "instance_group.count" else None
        if count is not None and count < 1:
            raise ConfigError(f"`instance_group.count` must be >= 1, but got {value}")
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
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read list value {raw!r}: {exc}") from exc
        return value
    return raw
