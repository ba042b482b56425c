"""``model_warmup`` as knobs: Triton runs a model's warmup requests on every instance while it
loads the model, before the model is READY, so the first requests a client sends do not pay
for lazy initialisation (memory arenas, kernel choice, a JIT).

Two field paths are knobs (docs/model-config.md, "Warmup"):

- ``model_warmup.count``: how many times the warmup sample runs. **0 means no warmup**: the
  block is removed (Triton itself runs a block with ``count: 0`` once, and skips one with
  ``batch_size: 0``, so 0 is the one value that can say "off");
- ``model_warmup.batch_size``: how many requests of batch 1 each run executes together, at most
  ``max_batch_size`` (1 for a model that cannot batch).

A block a knob creates is completed here (:func:`complete`): the name ``warmup`` (or
``warmup_<i>`` for element ``i``), batch size 1 unless a knob sets it, and zero data for every
required input with its config data type and dims (a variable dim, -1, becomes 1: Triton needs
every dim known). A block the model's own config.pbtxt has keeps what it says. ``tracker
check`` refuses warmup knobs where Triton cannot warm up (an ensemble, a stateful model whose
control inputs the warmup requests would lack) and a batch size above ``max_batch_size``
(tracker/search/knob_rules.py ``warmup_problems``).
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonclient.grpc import model_config_pb2

from tracker.errors import ConfigError
from tracker.spec.fields import path_parts, plain_path

PREFIX = "model_warmup."
COUNT = "model_warmup.count"
BATCH_SIZE = "model_warmup.batch_size"
NAME = "warmup"


def touched(values: Mapping[str, object]) -> bool:
    """Whether any of ``values`` is a ``model_warmup`` knob."""
    return any(plain_path(path).startswith(PREFIX) for path in values)


def _element(path: str) -> int:
    return path_parts(path)[0][1] or 0


def complete(cfg: model_config_pb2.ModelConfig, values: Mapping[str, object]) -> None:
    """Complete (in place) the ``model_warmup`` blocks after ``values`` were set: a block
    whose count a knob set to 0 is removed, the others get a name, a batch size and zero data
    for every required input where they have none. ConfigError for a batch size Triton's
    scheduler could never form (above ``max_batch_size``, or above 1 without batching)."""
    off = sorted({_element(p) for p, v in values.items() if plain_path(p) == COUNT and v == 0},
                 reverse=True)
    for index in off:
        if index < len(cfg.model_warmup):
            del cfg.model_warmup[index]
    for i, block in enumerate(cfg.model_warmup):
        if not block.name:
            block.name = NAME if i == 0 else f"{NAME}_{i}"
        if block.batch_size == 0:
            block.batch_size = 1
        if not block.inputs:
            _zero_inputs(cfg, block)
        largest = max(cfg.max_batch_size, 1)
        if block.batch_size > largest:
            raise ConfigError(f"`{BATCH_SIZE}` must be at most max_batch_size ({largest}; 1 "
                              f"for a model that cannot batch), but got {block.batch_size}")


def _zero_inputs(cfg: model_config_pb2.ModelConfig, block: model_config_pb2.ModelWarmup) -> None:
    for tensor in cfg.input:
        if tensor.optional:
            continue
        sample = block.inputs[tensor.name]
        sample.data_type = tensor.data_type
        sample.dims.extend(d if d > 0 else 1 for d in tensor.dims)
        sample.zero_data = True
