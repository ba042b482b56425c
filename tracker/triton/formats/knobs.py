"""The knob catalog: which config field paths each Triton backend reads.

From Triton's own documentation: the model configuration and optimization guides (what
Triton's core applies to every backend: scheduling, instances, batching, the response cache)
and each backend's README (onnxruntime_backend, pytorch_backend, python_backend,
openvino_backend, tensorrt_backend). A knob is a field path exactly as the study spec, Optuna
and MLflow name it; ``parameters.KEY`` is the string-valued ``parameters`` map a backend reads.

:func:`refused` refuses a ``parameters.*`` or ``optimization.*`` knob the model's backend does
not read (Triton's core ignores those fields and the backend never looks at the key, so the
trial would measure nothing new); every other field path is Triton core's and applies to all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BACKEND_ONLY_PREFIXES: tuple[str, ...] = ("parameters.", "optimization.")


@dataclass(frozen=True)
class Knob:
    """One knob: its field path, what it does (in a few words) and the values it takes."""

    path: str
    what: str
    values: str = ""


#: what Triton's core applies to a model of any backend
SHARED: tuple[Knob, ...] = (
    Knob("max_batch_size", "largest batch the scheduler forms", "int >= 0"),
    Knob("instance_group.count", "model instances (each its own copy)", "int >= 1"),
    Knob("instance_group.kind", "where instances run", "KIND_CPU, KIND_GPU"),
    Knob("instance_group.1.count", "group [i] of several (CPU and GPU groups, per-GPU "
         "counts); also [i].kind", "int >= 1"),
    Knob("instance_group.1.gpus", "GPUs of a KIND_GPU group", "indices the server has"),
    Knob("instance_group.rate_limiter.resources.name",
         "resource an instance needs to run (server.options.rate_limit on)", "a name"),
    Knob("instance_group.rate_limiter.resources.count", "how much of it", "int >= 0"),
    Knob("instance_group.rate_limiter.priority", "instance's share when resources are short",
         "int >= 0"),
    Knob("dynamic_batching.max_queue_delay_microseconds",
         "how long the batcher waits to fill a batch", "int >= 0"),
    Knob("dynamic_batching.preferred_batch_size", "batch sizes the batcher aims for",
         "int or list"),
    Knob("dynamic_batching.preserve_ordering", "responses in request order", "bool"),
    Knob("dynamic_batching.priority_levels", "request priority levels (0: off)", "int >= 0"),
    Knob("dynamic_batching.default_priority_level", "level of a request that names none",
         "1..priority_levels"),
    Knob("dynamic_batching.default_queue_policy.max_queue_size",
         "requests queued before new ones are refused", "int >= 0 (0: no limit)"),
    Knob("dynamic_batching.default_queue_policy.default_timeout_microseconds",
         "how long a request may wait in the queue", "int >= 0 (0: no limit)"),
    Knob("dynamic_batching.default_queue_policy.timeout_action",
         "what a timed-out request gets", "REJECT, DELAY"),
    Knob("model_warmup.count", "warmup runs while the model loads (zero data)", "int >= 0 "
         "(0: no warmup)"),
    Knob("model_warmup.batch_size", "requests each warmup run executes together",
         "1..max_batch_size"),
    Knob("response_cache.enable", "cache responses (needs server.options.cache_size)",
         "bool"),
    Knob("optimization.priority", "instance thread priority", "PRIORITY_DEFAULT, "
         "PRIORITY_MAX, PRIORITY_MIN"),
    Knob("optimization.input_pinned_memory.enable", "pinned memory for inputs", "bool"),
    Knob("optimization.output_pinned_memory.enable", "pinned memory for outputs", "bool"),
)

_ORT_GPU_EA = "optimization.execution_accelerators.gpu_execution_accelerator.name"
_ORT_CPU_EA = "optimization.execution_accelerators.cpu_execution_accelerator.name"

#: what each backend reads beyond the shared knobs (the backend's name as Triton spells it)
BY_BACKEND: dict[str, tuple[Knob, ...]] = {
    "onnxruntime": (
        Knob("parameters.intra_op_thread_count", "threads inside one operator", "0 = cores"),
        Knob("parameters.inter_op_thread_count", "threads across operators (parallel mode)",
             "0 = cores"),
        Knob("parameters.execution_mode", "operators sequential or parallel", "0, 1"),
        Knob("parameters.enable_mem_arena", "onnxruntime's memory arena", "0, 1"),
        Knob("parameters.enable_mem_pattern", "memory pattern planning", "0, 1"),
        Knob("parameters.memory.enable_memory_arena_shrinkage", "shrink the arena after runs",
             "e.g. cpu:0"),
        Knob("parameters.cudnn_conv_algo_search", "cuDNN convolution search (CUDA EP)",
             "0 exhaustive, 1 heuristic, 2 default"),
        Knob("parameters.arena_extend_strategy", "how the arena grows (CUDA EP)", "0, 1"),
        Knob("parameters.do_copy_in_default_stream", "copies on the compute stream (CUDA EP)",
             "0, 1"),
        Knob("optimization.graph.level", "graph optimizations", "-1 basic, 1 extended, "
             "2 none"),
        Knob(_ORT_GPU_EA, "GPU execution accelerator", "tensorrt, cuda"),
        Knob(_ORT_CPU_EA, "CPU execution accelerator", "openvino"),
    ),
    "pytorch": (
        Knob("parameters.DISABLE_OPTIMIZED_EXECUTION", "TorchScript optimized execution off",
             "true, false"),
        Knob("parameters.INFERENCE_MODE", "torch InferenceMode", "true, false"),
        Knob("parameters.DISABLE_CUDNN", "cuDNN off", "true, false"),
        Knob("parameters.ENABLE_WEIGHT_SHARING", "instances on a device share weights",
             "true, false"),
        Knob("parameters.ENABLE_CACHE_CLEANING", "empty the CUDA cache after each run",
             "true, false"),
        Knob("parameters.INTER_OP_THREAD_COUNT", "inter-op thread pool size", "int"),
        Knob("parameters.INTRA_OP_THREAD_COUNT", "intra-op thread pool size", "int"),
        Knob("parameters.ENABLE_JIT_EXECUTOR", "the TorchScript JIT executor", "true, false"),
        Knob("parameters.ENABLE_JIT_PROFILING", "TorchScript JIT profiling", "true, false"),
    ),
    "tensorrt": (
        Knob("optimization.cuda.graphs", "capture and replay CUDA graphs", "bool"),
        Knob("optimization.cuda.busy_wait_events", "busy-wait on CUDA events", "bool"),
        Knob("optimization.cuda.output_copy_stream", "a separate stream for output copies",
             "bool"),
    ),
    "tensorflow": (
        Knob(_ORT_GPU_EA, "TF-TRT or mixed precision", "tensorrt, auto_mixed_precision"),
        Knob("optimization.graph.level", "graph optimization (XLA)", "-1, 0, 1"),
    ),
    "openvino": (
        Knob("parameters.NUM_STREAMS", "executor partitions", "AUTO, NUMA or a number"),
        Knob("parameters.INFERENCE_NUM_THREADS", "threads for inference", "int"),
        Knob("parameters.PERFORMANCE_HINT", "OpenVINO's preset", "LATENCY, THROUGHPUT"),
        Knob("parameters.ENABLE_BATCH_PADDING", "pad short batches", "YES, NO"),
        Knob("parameters.SKIP_OV_DYNAMIC_BATCHSIZE", "no dynamic batch size", "YES, NO"),
    ),
    "python": (
        Knob("parameters.FORCE_CPU_ONLY_INPUT_TENSORS", "inputs always in CPU memory",
             "yes, no"),
    ),
}


def for_backend(backend: str, extra: Iterable[Knob] = ()) -> tuple[Knob, ...]:
    """The shared knobs, the backend's own, then ``extra`` (e.g. a model's own parameters)."""
    seen: dict[str, Knob] = {}
    for knob in (*SHARED, *BY_BACKEND.get(backend, ()), *extra):
        seen.setdefault(knob.path, knob)
    return tuple(seen.values())


def refused(keys: Iterable[str], backend: str, catalog: Iterable[Knob]) -> list[tuple[str, str]]:
    """(knob, message) for each backend-only knob (``parameters.*``, ``optimization.*``) that
    ``catalog`` does not hold."""
    known = {k.path for k in catalog}
    reads = sorted(p for p in known if p.startswith(BACKEND_ONLY_PREFIXES))
    out = []
    for key in keys:
        if key.startswith(BACKEND_ONLY_PREFIXES) and key not in known:
            out.append((key, f"the {backend} backend does not read this knob; the "
                             f"backend-specific knobs this model reads are "
                             f"{reads or 'none'} (plus every shared Triton field)"))
    return out
