"""The deploy check's first request to an entry model (before the study's probes,
:mod:`tracker.deploy.verify`): random inputs shaped after the served config, sent the way the
model takes requests.

- a plain model: one request (``ModelInfer``);
- a decoupled (streaming) model: one request over a gRPC stream, read to its final response
  (``ModelInfer`` refuses decoupled models); integer inputs are drawn from 1 to 4, so a count
  input (tokens to make, a length) is never 0;
- a stateful model (a sequence batcher): a whole sequence of :data:`STEPS` requests under one
  correlation ID, the start flag on the first and the end flag on the last (the server fills
  the START/END/READY/CORRID control inputs from them); a decoupled stateful model gets each
  step as a stream. The ID is new on the server (:func:`fresh_id`), so a model that keeps
  state per ID and refuses a start for an ID it holds answers it;
- an iterative sequence model (``sequence_batching { iterative_sequence: true }``: the model
  reschedules the request until its sequence ends): one request without a correlation ID
  or flags, streamed when decoupled, as Triton's own test of such models sends it (the
  server's sequencer gives it its ID and flags).

A failure raises :class:`~tracker.deploy.steps.StepFailed` naming what was sent.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tracker.triton.client import example_inputs
from tracker.triton.infer import Request, answer, sequence_answers
from tracker.triton.sequence import controls, is_decoupled, sends_sequences

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.triton.infer import InferClient

Array = np.ndarray[Any, Any]
Tensors = dict[str, tuple[str, Array]]
STEPS = 2  # the requests of a stateful model's check sequence

_lock = threading.Lock()
_last_id = 0


def fresh_id(cfg: ModelConfig) -> int | str:
    """A correlation ID this process never gave before: microseconds since the epoch, strictly
    increasing (so two checks of one process, or of two processes deploying one after the
    other under the repository lock, never share one); far above the study's probe IDs
    (:data:`tracker.outputs.probes.ID_BASE` onwards). A string where the CORRID control takes
    strings."""
    global _last_id
    with _lock:
        _last_id = max(time.time_ns() // 1000, _last_id + 1)
        value = _last_id
    return str(value) if controls(cfg).corrid_type == "string" else value



def check_inputs(cfg: ModelConfig, seed: int = 0) -> Tensors:
    """Random inputs for ``cfg`` (one batch item); a decoupled model's integers are >= 1."""
    tensors = example_inputs(cfg, seed=seed)
    if not is_decoupled(cfg):
        return tensors
    return {name: (dt, a + 1 if a.dtype.kind in "iu" else a)
            for name, (dt, a) in tensors.items()}


def what_is_sent(cfg: ModelConfig) -> str:
    """The step's name: what the check sends this model."""
    if sends_sequences(cfg):
        return "checking one whole sequence"
    return "checking one streamed inference" if is_decoupled(cfg) else "checking one inference"


def send(client: InferClient, name: str, version: int, cfg: ModelConfig) -> None:
    """The check's request(s) to ``version`` of ``name`` (the module docstring); ServerError
    with Triton's message when one fails."""
    request = Request(name, check_inputs(cfg), [o.name for o in cfg.output], version)
    if not sends_sequences(cfg):
        answer(client, request, is_decoupled(cfg))
        return
    # each step of a decoupled model streamed (gRPC only: an HTTP client says so)
    sequence_answers(client, dataclasses.replace(request, sequence_id=fresh_id(cfg)),
                     [check_inputs(cfg, seed=j) for j in range(STEPS)], is_decoupled(cfg))
