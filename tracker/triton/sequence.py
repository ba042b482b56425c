"""Stateful models: what a model's ``sequence_batching`` says, and the knobs it takes.

A model with a sequence batcher (Triton's ``sequence_batching``) is stateful: every request of
one sequence carries the same correlation ID, a start flag on its first request and an end flag
on its last, and the server routes them all to one model instance slot. The batcher is part of
what the model is: it is kept in every trial (``dynamic_batching``, ``sequence_batching`` and
``ensemble_scheduling`` are one protobuf ``oneof``, so a ``dynamic_batching.*`` knob would
silently drop it) and only its own knobs are tuned.

The strategy (``direct`` or ``oldest``) is a ``oneof`` too, so it is one knob of its own,
:data:`STRATEGY` (``sequence_batching.strategy``), whose values are the two names; a knob under
``sequence_batching.oldest.`` acts only when the strategy is ``oldest`` (under ``direct`` it is
dropped from the trial's config, which then says ``direct {}``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tracker.errors import ConfigError
from tracker.spec.fields import SEQUENCE_STRATEGY

Scalar = bool | int | float | str

#: the strategy knob: "direct" or "oldest" (a choice between two messages of one oneof)
STRATEGY = SEQUENCE_STRATEGY
STRATEGIES: tuple[str, ...] = ("direct", "oldest")
OLDEST = "sequence_batching.oldest."
DIRECT = "sequence_batching.direct."
PREFIX = "sequence_batching."

#: the sequence batcher's knobs offered by the default space (docs/stateful.md)
DEFAULT_CANDIDATES: tuple[int, ...] = (4, 16, 64)
DEFAULT_OLDEST_DELAYS_US: tuple[int, ...] = (0, 100, 1000)

_KIND = model_config_pb2.ModelSequenceBatching.Control


@dataclass(frozen=True)
class Controls:
    """The control inputs the server fills (input name per kind; None: not declared) and
    the correlation ID's type: ``"uint"`` (UINT64/INT64/UINT32/INT32, or no CORRID control)
    or ``"string"`` (a TYPE_STRING CORRID)."""

    start: str | None = None
    end: str | None = None
    ready: str | None = None
    corrid: str | None = None
    corrid_type: str = "uint"
    states: tuple[str, ...] = ()  # implicit state: the state input names

    def words(self) -> str:
        """``START, END, READY, CORRID (uint)`` and the implicit state, for ``tracker check``."""
        parts = [f"{kind} {name!r}" for kind, name in (
            ("START", self.start), ("END", self.end), ("READY", self.ready),
            ("CORRID", self.corrid)) if name is not None]
        text = ", ".join(parts) or "none declared"
        text += f"; correlation IDs: {'strings' if self.corrid_type == 'string' else 'integers'}"
        if self.states:
            text += f"; implicit state: {', '.join(self.states)}"
        return text


def is_sequence(cfg: ModelConfig) -> bool:
    """Whether the model has a sequence batcher (is stateful)."""
    return bool(cfg.HasField("sequence_batching"))


def is_iterative(cfg: ModelConfig) -> bool:
    """Whether the model is an iterative sequence model (``sequence_batching {
    iterative_sequence: true }``): one request is the whole sequence, the model reschedules
    it until the sequence ends, and the scheduler fills its controls itself."""
    return is_sequence(cfg) and bool(cfg.sequence_batching.iterative_sequence)


def is_decoupled(cfg: ModelConfig) -> bool:
    """Whether the model answers each request with a stream of responses
    (``model_transaction_policy { decoupled: true }``)."""
    return bool(cfg.model_transaction_policy.decoupled)


def sends_sequences(cfg: ModelConfig) -> bool:
    """Whether a client sends this model's requests as sequences (one correlation ID, a start
    flag on the first request and an end flag on the last): a sequence batcher that is not
    iterative. An iterative sequence model takes one request without ID or flags, as
    Triton's own test of such models sends it."""
    return is_sequence(cfg) and not is_iterative(cfg)


def controls(cfg: ModelConfig) -> Controls:
    """The model's control inputs, its correlation ID type and its implicit state."""
    seq = cfg.sequence_batching
    found: dict[str, str] = {}
    corrid_type = "uint"
    for control_input in seq.control_input:
        for control in control_input.control:
            if control.kind == _KIND.CONTROL_SEQUENCE_START:
                found["start"] = control_input.name
            elif control.kind == _KIND.CONTROL_SEQUENCE_END:
                found["end"] = control_input.name
            elif control.kind == _KIND.CONTROL_SEQUENCE_READY:
                found["ready"] = control_input.name
            elif control.kind == _KIND.CONTROL_SEQUENCE_CORRID:
                found["corrid"] = control_input.name
                if control.data_type == model_config_pb2.TYPE_STRING:
                    corrid_type = "string"
    states = tuple(s.input_name for s in seq.state)
    return Controls(corrid_type=corrid_type, states=states, **found)


def server_filled(cfg: ModelConfig) -> set[str]:
    """The input names the server fills for a stateful model (controls, implicit state)."""
    if not is_sequence(cfg):
        return set()
    seq = cfg.sequence_batching
    return {c.name for c in seq.control_input} | {s.input_name for s in seq.state}


def one_step_id(cfg: ModelConfig) -> int | str:
    """A correlation ID for one request that is a whole sequence (start and end set, so the
    ID is free again when it answers): microseconds since the epoch, a string where the
    CORRID control takes strings; 0 (no sequence) for a model without a sequence batcher."""
    if not is_sequence(cfg):
        return 0
    now = time.time_ns() // 1000
    return str(now) if controls(cfg).corrid_type == "string" else now


def strategy(cfg: ModelConfig) -> str:
    """The config's strategy: "oldest" when it says so, else "direct" (Triton's default)."""
    return "oldest" if cfg.sequence_batching.HasField("oldest") else "direct"


def set_strategy(cfg: ModelConfig, value: object) -> None:
    """Set the strategy (in place): ``direct {}`` or ``oldest {}``, keeping the fields the
    chosen one already has."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name not in STRATEGIES:
        raise ConfigError(f"`{STRATEGY}` must be one of {list(STRATEGIES)}, but got {value!r}")
    seq = cfg.sequence_batching
    if name == "oldest" and not seq.HasField("oldest"):
        seq.oldest.SetInParent()
    elif name == "direct" and not seq.HasField("direct"):
        seq.direct.SetInParent()


def _chosen(value: object) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def effective(values: Mapping[str, object]) -> dict[str, object]:
    """``values`` without the knobs that do not act: ``sequence_batching.oldest.*`` when the
    strategy chosen is ``direct`` (``direct.*`` when it is ``oldest``). Keys bare or
    ``<model>/``-prefixed (each model's own strategy). Two trials whose effective values
    agree serve the same configuration."""
    out: dict[str, object] = {}
    for key, value in values.items():
        prefix, sep, path = key.rpartition("/")
        name = _chosen(values.get(f"{prefix}{sep}{STRATEGY}"))
        if (name == "direct" and path.startswith(OLDEST)) or (
                name == "oldest" and path.startswith(DIRECT)):
            continue
        out[key] = value
    return out


def order_values(values: Mapping[str, object]) -> list[tuple[str, object]]:
    """The field values in the order they are applied: the strategy first, then the rest, with
    ``sequence_batching.oldest.*`` dropped when the strategy chosen is ``direct`` (and
    ``direct.*`` when it is ``oldest``): the other strategy's fields do not exist then."""
    kept = effective(values)
    out: list[tuple[str, object]] = []
    if STRATEGY in kept:
        out.append((STRATEGY, kept[STRATEGY]))
    out.extend((path, value) for path, value in kept.items() if path != STRATEGY)
    return out


def scheduler_problem(cfg: ModelConfig, path: str) -> str | None:
    """Why knob ``path`` cannot be applied to this model's scheduler (None: it can)."""
    if is_sequence(cfg) and path.startswith("dynamic_batching."):
        return (f"the model is stateful (it has a sequence batcher) and keeps it in every "
                f"trial; a dynamic_batching knob would replace it. Tune the sequence "
                f"batcher's knobs instead: {STRATEGY}, {OLDEST}max_candidate_sequences, "
                f"{OLDEST}max_queue_delay_microseconds, {OLDEST}preferred_batch_size, "
                f"sequence_batching.max_sequence_idle_microseconds")
    if not is_sequence(cfg) and path.startswith(PREFIX):
        return ("the model has no sequence batcher (it is not stateful), so sequence_batching "
                "knobs do not apply; a trial would add a sequence batcher and change what the "
                "model is")
    return None


def default_knobs(cfg: ModelConfig, batching: bool) -> dict[str, list[Scalar]]:
    """The sequence batcher's knobs in the default space: with batching, the strategy and the
    oldest strategy's candidates and queue delay (the direct strategy schedules one slot per
    sequence and has nothing the default space tunes); without batching, none (each instance
    runs one sequence at a time whatever the strategy)."""
    if not batching:
        return {}
    return {STRATEGY: list(STRATEGIES),
            f"{OLDEST}max_candidate_sequences": list(DEFAULT_CANDIDATES),
            f"{OLDEST}max_queue_delay_microseconds": list(DEFAULT_OLDEST_DELAYS_US)}
