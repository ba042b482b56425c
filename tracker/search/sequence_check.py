"""What ``tracker check`` says about a stateful model: its sequence batcher, its controls, the
sequences the load will send and the metrics that apply (docs/stateful.md); SpecError for a
load that cannot send them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracker.errors import MeasurementError, SpecError
from tracker.measure.sequence_steps import check_sequence_load, id_type, sequence_samples
from tracker.triton import sequence
from tracker.triton.formats.knobs import Knob

if TYPE_CHECKING:
    from tracker.spec import StudySpec
    from tracker.triton.model_config import ModelConfig, ModelInfo

#: the sequence batcher's knobs (in `tracker check` they replace the dynamic batcher's)
KNOBS: tuple[Knob, ...] = (
    Knob(sequence.STRATEGY, "how sequences are batched: one slot each, or the oldest first",
         "direct, oldest"),
    Knob(f"{sequence.OLDEST}max_candidate_sequences", "sequences the oldest strategy picks from",
         "int >= 1"),
    Knob(f"{sequence.OLDEST}max_queue_delay_microseconds", "how long it waits to fill a batch",
         "int >= 0"),
    Knob(f"{sequence.OLDEST}preferred_batch_size", "batch sizes it aims for", "int or list"),
    Knob(f"{sequence.PREFIX}max_sequence_idle_microseconds",
         "an idle sequence's slot is freed after this", "int >= 0"),
)


def knobs_of(cfg: ModelConfig, catalog: tuple[Knob, ...]) -> tuple[Knob, ...]:
    """A backend's knob catalog as it applies to this model: for a stateful one the dynamic
    batcher's knobs replaced by the sequence batcher's."""
    if not sequence.is_sequence(cfg):
        return catalog
    return (*(k for k in catalog if not k.path.startswith("dynamic_batching.")), *KNOBS)


SEQUENCE_METRICS = ("perf_sequence_throughput (seq/s), "
                    "perf_sequence_latency_avg|p50|p90|p99 (a whole sequence, ms), and "
                    "per request perf_throughput and perf_latency_*")


def sequence_lines(spec: StudySpec, info: ModelInfo) -> list[str]:
    """The lines for a stateful model ([] for any other); SpecError naming the field when
    the load cannot send its sequences (a ``load.sequence`` on a model without a sequence
    batcher, inputs it cannot fill, an ID kind the CORRID control refuses) or asks what a
    sequence load does not do (``load.repeat``)."""
    cfg, load = info.config, spec.load
    try:
        check_sequence_load(cfg, load)
    except MeasurementError as err:
        raise SpecError([f"load.sequence: {err}"]) from err
    if not sequence.is_sequence(cfg):
        return []
    if sequence.is_iterative(cfg):
        return [f"  stateful: yes, an iterative sequence model (iterative_sequence: true; "
                f"strategy {sequence.strategy(cfg)}): each request is a whole sequence that "
                "the model reschedules until it ends, so the load and the output check send "
                "it as one request without correlation ID or flags (the scheduler gives "
                "them), streamed when the model is decoupled"]
    if load.repeat is not None:
        raise SpecError([
            f"load.repeat: model {cfg.name!r} is stateful (it has a sequence batcher): its "
            "load sends sequences, whose steps are not repeated, and Triton's sequence "
            "batcher does not use the response cache (Triton's response cache guide, known "
            "limitations), so load.repeat would measure nothing; remove load.repeat"])
    try:
        ids = id_type(cfg, load)
    except MeasurementError as err:
        raise SpecError([f"load.sequence.ids: {err}"]) from err
    try:
        steps, seqs = sequence_samples(cfg, load)
    except MeasurementError as err:
        field = "load.input_data" if load.input_data else "load"
        raise SpecError([f"{field}: {err} (a stateful model's steps are made like any "
                         "request's)"]) from err
    if seqs is not None:
        lengths = sorted({len(s) for s in seqs})
        made = (f"{len(seqs)} sequences from {load.input_data} ({len(steps)} steps, "
                f"{lengths[0]}-{lengths[-1]} per sequence)")
    else:
        section = load.sequence
        length = section.length.words() if section is not None else "20"
        seed = section.seed if section is not None and section.seed is not None else 0
        made = (f"{length} steps per sequence" + (f" (drawn with seed {seed})" if
                                                   "-" in length else "")
                + f", inputs: {len(steps)} sample(s) "
                + (f"from {load.input_data}" if load.input_data else "of random data"))
    rate = (f"; request rate = steps/s spread over {load.sequence.active if load.sequence else 4}"
            " open sequences" if load.request_rate else "")
    return [
        f"  stateful: yes, sequence batcher kept in every trial (strategy "
        f"{sequence.strategy(cfg)}); controls: {sequence.controls(cfg).words()}",
        f"  sequences: {made}; concurrency = sequences in flight, each slot one sequence after "
        f"another{rate}; correlation IDs: {'strings' if ids == 'string' else 'unsigned integers'}"
        ", a new one per sequence, unique across load processes, levels, retries and runs",
        f"  metrics that apply: {SEQUENCE_METRICS}",
    ]
